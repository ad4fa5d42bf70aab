// Package fault makes a link misbehave on purpose — drop, duplicate,
// reorder, corrupt, delay and CE-mark the packets it sends, at random
// (seeded) or by rules — for tests and for diagnosing applications. It is a
// wrapper in front of any link that can seal its packets (link.Sealer):
// the inner link fills each packet's ICRC for the port it really leaves
// from, the stage acts on the finished packet, and the inner link sends
// what the stage lets through as it is. A corrupted packet so carries a
// wrong ICRC, and the receiver drops it as it would a packet damaged on a
// real wire. The grammar of the faults is in docs/FAULT.md.
package fault

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stats"
)

// chunk is how many of the caller's packets go through the stage before
// what it lets go is sent.
const chunk = link.MaxBatch / 2

// Link is a link with a fault stage in front of its writes. Reads go to
// the inner link unchanged.
type Link struct {
	inner link.Sealer
	st    *stage

	// The write lock, held by WriteBatch and by the stage's release
	// goroutine, so that the stage sees packets in one order. Lock order:
	// mu, then the stage's lock.
	mu     sync.Mutex
	out    []outPkt      // the stage's output; guarded by mu
	sealed []link.Sealed // out as the inner link sends it; guarded by mu
}

var _ link.Link = (*Link)(nil)

// Wrap puts a fault stage configured by cfg in front of inner's writes. It
// returns an error, wrapping ErrBad, for an invalid configuration. The
// stage's goroutine, if cfg holds packets, runs until Close.
func Wrap(inner link.Sealer, cfg Config) (*Link, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Link{inner: inner, st: newStage(cfg)}
	l.st.startRelease(l.flushHeld)
	return l, nil
}

// WriteBatch implements link.Link.WriteBatch: it takes the caller's
// packets in chunks: each packet is sealed by the inner link and passes
// the stage, then what the stage lets go now is sent. Packets the stage
// drops or holds count as sent.
func (l *Link) WriteBatch(pkts []link.Packet) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	done, bytes := 0, uint64(0)
	var err error
	for done < len(pkts) && err == nil {
		out := l.out[:0]
		end := done
		for end < len(pkts) && end-done < chunk {
			p := &pkts[end]
			src, serr := l.inner.Seal(p)
			if serr != nil {
				err = serr
				break
			}
			out = l.st.admit(p.Buf, link.Plain(p.Peer), src, end, out)
			end++
		}
		k, werr := l.send(out)
		if werr != nil {
			err = werr // replaces a sealing error further on
			for _, o := range out[k:] {
				if o.from >= 0 {
					end = o.from
					break
				}
			}
		}
		l.st.recycle(out, k)
		l.out = out[:0]
		for _, p := range pkts[done:end] {
			bytes += uint64(len(p.Buf))
		}
		done = end
	}
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = net.ErrClosed
	} else if err != nil && !errors.Is(err, link.ErrPacketSize) && !errors.Is(err, link.ErrAddrFamily) && !errors.Is(err, link.ErrUnknownPeer) {
		err = fmt.Errorf("link: write %v: %w", l.inner.LocalAddr(), err)
	}
	link.CountTx(l.st.stats, uint64(done), bytes, err)
	return done, err
}

// send hands the stage's output to the inner link, in order, and returns
// how many went; l.mu is held.
func (l *Link) send(out []outPkt) (int, error) {
	s := l.sealed[:0]
	for i := range out {
		o := &out[i]
		s = append(s, link.Sealed{Buf: o.buf, Dst: o.dst, Src: o.src, CE: o.ce})
	}
	n, err := l.inner.WriteSealed(s)
	clear(s)
	l.sealed = s[:0]
	return n, err
}

// flushHeld sends the held packets that are due, for the stage's release
// goroutine, and returns the next deadline.
func (l *Link) flushHeld() monotime.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, next := l.st.due(l.out[:0])
	// A packet the inner link refuses (a firewall's EPERM, say) is lost
	// alone, as on the path without faults; the rest of the batch still
	// goes.
	for rest := out; len(rest) > 0; {
		k, err := l.send(rest)
		if err == nil {
			break
		}
		if errors.Is(err, net.ErrClosed) {
			l.st.recycle(rest, k) // closing: the rest is discarded and counted
			l.out = out[:0]
			return next
		}
		l.st.stats.Inc(stats.LinkSendErrors)
		rest = rest[min(k+1, len(rest)):]
	}
	l.st.recycle(out, len(out))
	l.out = out[:0]
	return next
}

// Stats implements link.Link.Stats: the inner link's counters and what the
// stage did and accepted.
func (l *Link) Stats() link.Stats {
	s := l.inner.Stats()
	w := l.st.stats.Snapshot()
	for i := range s {
		s[i] += w[i]
	}
	return s
}

// Close closes the inner link, which ends a flush blocked on the network,
// then stops the stage and discards (and counts) what it holds.
func (l *Link) Close() error {
	err := l.inner.Close()
	l.st.stop()
	return err
}

// Caps implements link.Link.Caps: the inner link's, but the stage sends
// each packet alone (no segmentation) from unconnected sockets, whose IPv4
// ID is the 0 the seal counted on.
func (l *Link) Caps() link.Caps {
	return l.inner.Caps() &^ (link.CapSegment | link.CapConnectPort | link.CapCheapWrite)
}

// Segments implements link.Link.Segments: never through the stage.
func (l *Link) Segments(netip.AddrPort) bool { return false }

// ConnectPort implements link.Link.ConnectPort: nothing to get ready.
func (l *Link) ConnectPort(uint16, netip.AddrPort) {}

// ReadBatch implements link.Link.ReadBatch with the inner link's.
func (l *Link) ReadBatch(pkts []link.Packet) (int, error) { return l.inner.ReadBatch(pkts) }

// PollBatch implements link.Link.PollBatch with the inner link's.
func (l *Link) PollBatch(pkts []link.Packet) (int, error) { return l.inner.PollBatch(pkts) }

// ReadLent implements link.Link.ReadLent with the inner link's.
func (l *Link) ReadLent(pkts []link.Packet, wait bool) (int, error) {
	return l.inner.ReadLent(pkts, wait)
}

// ReturnLent implements link.Link.ReturnLent with the inner link's.
func (l *Link) ReturnLent() { l.inner.ReturnLent() }

// Interrupt implements link.Link.Interrupt with the inner link's.
func (l *Link) Interrupt() { l.inner.Interrupt() }

// LocalAddr implements link.Link.LocalAddr with the inner link's.
func (l *Link) LocalAddr() netip.AddrPort { return l.inner.LocalAddr() }
