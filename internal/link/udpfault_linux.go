package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// faultChunk is how many of the caller's packets go through the fault
// stage before what it lets go is sent.
const faultChunk = MaxBatch / 2

// writeFault is WriteBatch through the fault stage; u.writeMu is held. It
// takes the caller's packets in chunks: each packet is checked, gets its
// ICRC and passes the stage, then what the stage lets go now is sent with
// sendmmsg, grouped by source port. Packets the stage drops or holds count
// as sent.
func (u *UDP) writeFault(pkts []Packet) (int, error) {
	for i := range pkts {
		flatten(&pkts[i])
	}
	done, bytes := 0, uint64(0)
	var err error
	for done < len(pkts) && err == nil {
		out := u.fout[:0]
		end := done
		for end < len(pkts) && end-done < faultChunk {
			p := &pkts[end]
			src, perr := u.prepareFault(p)
			if perr != nil {
				err = perr
				break
			}
			out = u.fault.admit(p.Buf, plain(p.Peer), src, end, out)
			end++
		}
		k, werr := u.sendOut(out)
		if werr != nil {
			err = werr // replaces a prepare error further on
			for _, o := range out[k:] {
				if o.from >= 0 {
					end = o.from
					break
				}
			}
		}
		u.fault.recycle(out, k)
		u.fout = out[:0]
		for _, p := range pkts[done:end] {
			bytes += uint64(len(p.Buf))
		}
		done = end
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	} else if err != nil && !errors.Is(err, ErrPacketSize) && !errors.Is(err, ErrAddrFamily) {
		err = fmt.Errorf("link: write %v: %w", u.laddr, err)
	}
	u.stats.addTx(uint64(done), bytes, err)
	return done, err
}

// prepareFault checks p, fills its ICRC for the port it will leave from,
// and returns that source address.
func (u *UDP) prepareFault(p *Packet) (netip.AddrPort, error) {
	if !p.sendable(false) {
		return netip.AddrPort{}, ErrPacketSize
	}
	dst := plain(p.Peer)
	if dst.Addr().Is4() != u.laddr.Addr().Is4() {
		return netip.AddrPort{}, ErrAddrFamily
	}
	_, src, fallback, err := u.portConn(p.SrcPort)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if fallback {
		u.stats.portFallbacks.Add(1)
	}
	f := sendFields(src, dst)
	putICRC(p.Buf, &f)
	return src, nil
}

// sendOut sends the fault stage's output in order, consecutive packets
// from one source port in one sendmmsg, and returns how many went.
func (u *UDP) sendOut(out []faultOut) (int, error) {
	m := u.wr
	is6 := u.laddr.Addr().Is6()
	sent := 0
	for sent < len(out) {
		port := out[sent].src.Port()
		rc, _, _, err := u.portConn(port) // the socket prepareFault chose
		if err != nil {
			return sent, err
		}
		cnt := 0
		for sent+cnt < len(out) && cnt < MaxBatch && out[sent+cnt].src.Port() == port {
			o := &out[sent+cnt]
			m.setName(cnt, o.dst, u.scope)
			m.setBuf(cnt, o.buf)
			m.setCE(cnt, o.ce, is6)
			cnt++
		}
		for off := 0; off < cnt; {
			k, err := m.writeTo(rc, off, cnt-off, false)
			sent, off = sent+k, off+k
			if err != nil {
				m.clearBufs(cnt)
				return sent, err
			}
		}
		m.clearBufs(cnt)
	}
	return sent, nil
}

// flushHeld sends the held packets that are due, for the fault stage's
// release goroutine, and returns the next deadline.
func (u *UDP) flushHeld() time.Time {
	u.writeMu.Lock()
	defer u.writeMu.Unlock()
	out, next := u.fault.due(u.fout[:0])
	// A packet the socket refuses (a firewall's EPERM, say) is lost alone,
	// as on the path without faults; the rest of the batch still goes.
	for rest := out; len(rest) > 0; {
		k, err := u.sendOut(rest)
		if err == nil {
			break
		}
		if errors.Is(err, net.ErrClosed) {
			u.fault.recycle(rest, k) // closing: the rest is discarded and counted
			u.fout = out[:0]
			return next
		}
		u.stats.sendErrors.Add(1)
		rest = rest[min(k+1, len(rest)):]
	}
	u.fault.recycle(out, len(out))
	u.fout = out[:0]
	return next
}
