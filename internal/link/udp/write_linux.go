//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/stats"
)

// WriteBatch implements link.Link.WriteBatch.
func (u *Link) WriteBatch(pkts []link.Packet) (int, error) {
	u.wr.Lock()
	defer u.wr.Unlock()
	return u.writeSocket(pkts)
}

// writeSocket is WriteBatch over the socket; u.wr is held.
func (u *Link) writeSocket(pkts []link.Packet) (int, error) {
	sent, bytes := 0, uint64(0)
	var err error
	icmpRetries := 0
	for sent < len(pkts) && err == nil {
		// One group: consecutive packets with the same SrcPort, at most
		// link.MaxBatch, up to the first packet that cannot be sent.
		ps, src, fallback, perr := u.writePort(pkts[sent].SrcPort)
		if perr != nil {
			err = perr
			break
		}
		cnt := 0
		for sent+cnt < len(pkts) && cnt < link.MaxBatch && pkts[sent+cnt].SrcPort == pkts[sent].SrcPort {
			// A gathered payload is put together in Buf as the ICRC is
			// computed (flattenICRC), so Buf must have room for it.
			p := &pkts[sent+cnt]
			if err = u.check(p, src, p.Size() <= cap(p.Buf)); err != nil {
				break
			}
			cnt++
		}
		if fallback {
			u.stats.Add(stats.PortFallbacks, uint64(cnt))
		}
		var conn netip.AddrPort // the peer rc is connected to
		if ps != nil && cnt > 0 {
			u.connectPort(ps, src, link.Plain(pkts[sent].Peer))
			conn = ps.peer
		}
		var k int
		var b uint64
		var werr error
		refused := false
		if u.wr.gso {
			k, b, refused, werr = u.sendRuns(ps, src, pkts[sent:sent+cnt])
		} else {
			k, b, werr = u.sendPlain(ps, src, pkts[sent:sent+cnt])
		}
		sent, bytes = sent+k, bytes+b
		if conn.IsValid() && k == 0 && icmpError(werr) && icmpRetries < link.MaxBatch {
			// A connected socket reports an ICMP error (port
			// unreachable, say) that an earlier datagram drew by
			// failing the next send, which never left (the kernel
			// checks the socket's error before it builds the
			// datagram). An unconnected socket never reports them:
			// send again, as it would have.
			icmpRetries++
			err = nil
			continue
		}
		if refused {
			// The kernel or the route will not segment (an IPsec
			// route, say): plain datagrams from now on, starting with
			// the super-packet it refused.
			u.wr.gso = false
			err = nil
			continue
		}
		if werr != nil {
			err = werr // replaces a check error further on
		}
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	} else if err != nil && !errors.Is(err, link.ErrPacketSize) && !errors.Is(err, link.ErrAddrFamily) {
		err = fmt.Errorf("link: write %v: %w", u.laddr, err)
	}
	link.CountTx(u.stats, uint64(sent), bytes, err)
	return sent, err
}

// check returns why p cannot be sent from src, or nil; gather says
// whether the path takes a gathered payload (Packet.sendable).
func (u *Link) check(p *link.Packet, src netip.AddrPort, gather bool) error {
	if !p.Sendable(gather) {
		return link.ErrPacketSize
	}
	if p.Peer.Addr().Unmap().Is4() != src.Addr().Is4() {
		return link.ErrAddrFamily
	}
	return nil
}

// sendPlain sends pkts (checked, at most link.MaxBatch) from src on ps's
// socket (nil: the link's own), one datagram each, and returns how many
// went and their bytes.
func (u *Link) sendPlain(ps *portSocket, src netip.AddrPort, pkts []link.Packet) (int, uint64, error) {
	m := u.wr.m
	defer m.clearBufs(len(pkts))
	rc, conn, ids := u.sockOf(ps), ps.conn(), ps.idCounter()
	if ps != nil && ps.seg != 0 {
		// The kernel refused a super-packet (u.wr.gso turned off): the
		// socket's segment size goes too, or its plain datagrams would
		// be refused as well.
		if err := m.setSegment(rc, 0); err != nil {
			return 0, 0, err
		}
		ps.seg = 0
	}
	for i := range pkts {
		p := &pkts[i]
		dst := link.Plain(p.Peer)
		f := link.SendFields(src, dst)
		f.Cache = &u.wr.hdr
		if ids != nil {
			f.ID = ids.next + uint16(i)
		}
		p.FlattenICRC(&f)
		m.setName(i, dst, u.scope)
		m.connected(i, dst == conn)
		m.setBuf(i, p.Buf)
	}
	sent, bytes := 0, uint64(0)
	lone := len(pkts) == 1 && u.loneSend(rc, ps, m, 0)
	for sent < len(pkts) {
		k, err := u.writeTo(rc, sent, len(pkts)-sent, lone)
		for i := range pkts[sent : sent+k] {
			bytes += uint64(len(pkts[sent+i].Buf))
		}
		sent += k
		if ids != nil {
			ids.next += uint16(k)
		}
		if err != nil {
			if ids != nil {
				ids.known = false // the failed datagram may have taken an ID
			}
			return sent, bytes, err
		}
	}
	return sent, bytes, nil
}

// sendRuns sends pkts (checked, at most link.MaxBatch) from src on ps's socket
// (nil: the link's own), each run gsoRun finds as one UDP_SEGMENT
// super-packet whose segment k carries its ICRC over IPv4 ID k, and
// returns how many packets went and their bytes. refused reports that the error came from a send the
// kernel would not make with a segment size (EIO, EINVAL): the caller
// should send plain datagrams.
func (u *Link) sendRuns(ps *portSocket, src netip.AddrPort, pkts []link.Packet) (sent int, bytes uint64, refused bool, err error) {
	m := u.wr.m
	defer m.clearBufs(len(pkts))
	rc, conn, ids := u.sockOf(ps), ps.conn(), ps.idCounter()
	maxBytes := maxGSOBytes(src.Addr().Is6())
	stage := u.wr.stage[:0]
	nm := 0
	var count idCount // the IDs the messages get, counted ahead of ids
	if ids != nil {
		count = *ids
	}
	seg0 := 0 // the segment size of the first message
	for i := 0; i < len(pkts); nm++ {
		n := gsoRun(pkts[i:], maxSegments, maxBytes)
		dst := link.Plain(pkts[i].Peer)
		f := link.SendFields(src, dst)
		f.Cache = &u.wr.hdr
		base := count.next // 0 without ids
		if ids != nil {
			count.advance(n)
		}
		seg := pkts[i].Size()
		if nm == 0 {
			seg0 = seg
		}
		if n > 1 && seg <= stageSegment && len(stage)+n*seg <= cap(stage) {
			// One I/O vector for the super-packet: its segments put
			// together one after another in the stage.
			start := len(stage)
			for k := range n {
				if f.Src.Is4() {
					f.ID = base + uint16(k)
				}
				stage = stage[:len(stage)+pkts[i+k].FlattenInto(stage[len(stage):cap(stage)], &f)]
			}
			m.setBuf(i, stage[start:])
			m.setMsg(nm, i, 1, n, dst, u.scope, seg)
			m.connected(nm, dst == conn)
			i += n
			continue
		}
		for k := range n {
			p := &pkts[i+k]
			if f.Src.Is4() {
				f.ID = base + uint16(k)
			}
			p.FlattenICRC(&f)
			m.setBuf(i+k, p.Buf)
		}
		m.setMsg(nm, i, n, n, dst, u.scope, seg)
		m.connected(nm, dst == conn)
		i += n
	}
	lone := nm == 1 && u.loneSend(rc, ps, m, seg0)
	if !lone && ps != nil && ps.seg != 0 {
		m.plainSegments(nm)
	}
	for off := 0; off < nm; {
		k, werr := u.writeTo(rc, off, nm-off, lone)
		for _, c := range m.segs[off : off+k] {
			for i := sent; i < sent+int(c); i++ {
				bytes += uint64(pkts[i].Size()) // a staged packet still has its payload aside
			}
			sent += int(c)
			if ids != nil {
				ids.advance(int(c))
			}
		}
		off += k
		if werr != nil {
			if ids != nil {
				ids.known = false // the failed message may have taken an ID
			}
			refused = (m.segs[off] > 1 || lone && ps.seg != 0) && (errors.Is(werr, syscall.EIO) || errors.Is(werr, syscall.EINVAL))
			return sent, bytes, refused, werr
		}
	}
	return sent, bytes, false, nil
}

// sockOf returns ps's socket, or the link's own for nil.
func (u *Link) sockOf(ps *portSocket) *sockFD {
	if ps == nil {
		return u.sock
	}
	return ps.sock
}

// writeTo is mmsg.writeTo on the link's write state, counting a lone
// send that went (Stats.LoneSends).
func (u *Link) writeTo(rc *sockFD, off, cnt int, lone bool) (int, error) {
	k, err := u.wr.m.writeTo(rc, off, cnt, lone)
	if lone && k > 0 {
		u.stats.Inc(stats.LoneSends)
	}
	return k, err
}
