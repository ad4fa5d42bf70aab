//go:build linux

package udp

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
	"golang.org/x/sys/unix"
)

// probeA and probeB are the addresses of the links these tests connect
// port sockets between: addresses of their own, because the source ports
// they bind (SourcePort of small QPNs) are those other packages' tests
// bind on 127.0.0.1 when go test runs packages side by side.
const probeA, probeB = "127.0.8.1", "127.0.8.2"

// connectedPort opens a's port socket for sport and connects it to peer as
// the first packet to peer would.
func connectedPort(t *testing.T, a *Link, sport uint16, peer netip.AddrPort) (*portSocket, netip.AddrPort) {
	t.Helper()
	ps, src, fallback, err := a.portSocket(sport)
	if err != nil || ps == nil || fallback {
		t.Fatalf("portSocket(%d) = %v, %v, %v", sport, ps, fallback, err)
	}
	a.wr.Lock()
	a.connectPort(ps, src, peer)
	a.wr.Unlock()
	return ps, src
}

// lowBytes sends count probes with odd selectors from fd (at src) to a's
// probe socket, each a single datagram, or with segs > 1 one super-packet
// of segs segments, and returns the low bytes of their IDs in sending
// order.
func lowBytes(t *testing.T, a *Link, fd int, src netip.AddrPort, count, segs int) []byte {
	t.Helper()
	p := a.wr.probe
	msg := make([]byte, segs*probeLen)
	for i := range count {
		for k := range segs {
			msg[k*probeLen] = byte(2*(i*segs+k) + 1)
		}
		var err error
		if segs == 1 {
			err = unix.Sendto(fd, msg, 0, &p.to)
		} else {
			_, err = unix.SendmsgN(fd, msg, p.oob, &p.to, 0)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	low := make([]byte, count*segs)
	deadline := time.Now().Add(5 * time.Second)
	for seen := 0; seen < len(low); {
		n, from, err := unix.Recvfrom(p.fd, p.buf[:], unix.MSG_DONTWAIT)
		if err == unix.EAGAIN {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d probes arrived", seen, len(low))
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sa := from.(*unix.SockaddrInet4)
		if netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)) != src {
			continue
		}
		low[p.buf[0]/2] = byte(n - 1)
		seen++
	}
	return low
}

// TestIDProbe learns the ID counter of a connected port socket and checks
// that the kernel goes on numbering as the link counts: one ID per
// datagram, base+k for segment k of a super-packet, then the counter one
// on (or, on a kernel that reserves an ID per segment, past the last).
// The probe socket's filter reports each probe's low byte.
func TestIDProbe(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{{"GSO", Config{}}, {"no GSO", Config{NoGSO: true}}} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", tc.cfg)
			ps, src := connectedPort(t, a, link.SourcePort(0x41), b.LocalAddr())
			if ps.peer != b.LocalAddr() || !ps.ids.known {
				t.Fatalf("port socket: peer %v, ID counter known %v; want %v, true", ps.peer, ps.ids.known, b.LocalAddr())
			}
			c := ps.ids
			// Single datagrams: one ID each.
			for i, low := range lowBytes(t, a, ps.sock.fd, src, 5, 1) {
				if want := byte(c.next); low != want {
					t.Errorf("datagram %d: ID low byte %#02x, want %#02x", i, low, want)
				}
				c.advance(1)
			}
			if !a.wr.gso {
				return
			}
			// A super-packet: base+k, then the counter moves on.
			for i, low := range lowBytes(t, a, ps.sock.fd, src, 1, 3) {
				if want := byte(c.next + uint16(i)); low != want {
					t.Errorf("segment %d: ID low byte %#02x, want %#02x", i, low, want)
				}
			}
			c.advance(3)
			if low := lowBytes(t, a, ps.sock.fd, src, 1, 1)[0]; low != byte(c.next) {
				t.Errorf("datagram after a 3-segment super-packet: ID low byte %#02x, want %#02x (per segment: %v)", low, byte(c.next), c.perSeg)
			}
			t.Logf("a super-packet takes one ID per segment from the counter: %v", c.perSeg)
		})
	}
}

// TestConnectedPortFallback: a port socket whose counter cannot be learned
// (the probes go nowhere) is disconnected and sends unconnected, with ID
// 0, counted in Stats[stats.UnconnectedPorts].
func TestConnectedPortFallback(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	a.wr.Lock()
	if !a.openProbe() {
		t.Fatal("no probe socket")
	}
	a.wr.probe.to.Port = int(linktest.FreePort(t, "127.0.0.1").Port()) // nobody listens there
	a.wr.Unlock()
	pkts := linktest.Batch(6, b.LocalAddr())
	for i := range pkts {
		pkts[i].SrcPort = link.SourcePort(0x42)
	}
	if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	got := linktest.ReadN(t, b, len(pkts))
	linktest.CheckReceivedIDs(t, got, pkts, make([]uint16, len(pkts)), netip.AddrPortFrom(a.LocalAddr().Addr(), link.SourcePort(0x42)), b.LocalAddr())
	if s := a.Stats(); s[stats.ConnectedPorts] != 0 || s[stats.UnconnectedPorts] != 1 {
		t.Errorf("ConnectedPorts, UnconnectedPorts = %d, %d; want 0, 1", s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
	}
	if ps := a.ports.m[link.SourcePort(0x42)]; ps.peer.IsValid() || !ps.unconnected {
		t.Errorf("port socket: peer %v, unconnected %v; want none, true", ps.peer, ps.unconnected)
	}
}

// TestConnectedPortRelearnFails: a connected port socket whose counter the
// link knew and lost (a send error leaves it unknown) and then cannot
// learn again is disconnected: its packets go out unconnected with ID 0,
// and it moves from Stats[stats.ConnectedPorts] to UnconnectedPorts, counted
// once.
func TestConnectedPortRelearnFails(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	sport := link.SourcePort(0x44)
	src := netip.AddrPortFrom(a.LocalAddr().Addr(), sport)
	send := func(n int) []link.Packet {
		t.Helper()
		pkts := linktest.Batch(n, b.LocalAddr())
		for i := range pkts {
			pkts[i].SrcPort = sport
		}
		if k, err := a.WriteBatch(pkts); k != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", k, err)
		}
		return pkts
	}
	pkts := send(4)
	linktest.CheckReceivedIDs(t, linktest.ReadN(t, b, len(pkts)), pkts, wantIDs(a, pkts), src, b.LocalAddr())
	if s := a.Stats(); s[stats.ConnectedPorts] != 1 || s[stats.UnconnectedPorts] != 0 {
		t.Fatalf("ConnectedPorts, UnconnectedPorts = %d, %d; want 1, 0", s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
	}
	a.wr.Lock()
	ps := a.ports.m[sport]
	probePort := a.wr.probe.to.Port
	ps.ids.known = false                                               // as a failed send leaves it
	a.wr.probe.to.Port = int(linktest.FreePort(t, "127.0.0.1").Port()) // the probes now go nowhere
	a.wr.Unlock()
	for round := range 2 { // the second finds the socket unconnected for good
		pkts = send(5)
		linktest.CheckReceivedIDs(t, linktest.ReadN(t, b, len(pkts)), pkts, make([]uint16, len(pkts)), src, b.LocalAddr())
		if s := a.Stats(); s[stats.ConnectedPorts] != 0 || s[stats.UnconnectedPorts] != 1 {
			t.Errorf("round %d: ConnectedPorts, UnconnectedPorts = %d, %d; want 0, 1", round, s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
		}
	}
	if ps.peer.IsValid() || !ps.unconnected || ps.ids.known {
		t.Errorf("port socket: peer %v, unconnected %v, counter known %v; want none, true, false", ps.peer, ps.unconnected, ps.ids.known)
	}
	// On the wire: the socket's datagrams carry ID 0, as an unconnected
	// socket's with DF do (a connected one's would carry its counter).
	a.wr.Lock()
	a.wr.probe.to.Port = probePort
	a.wr.Unlock()
	if low := lowBytes(t, a, ps.sock.fd, src, 3, 1); low[0] != 0 || low[1] != 0 || low[2] != 0 {
		t.Errorf("IDs' low bytes on the wire %v, want 0", low)
	}
}

// TestConnectedPortICMP: a connected socket reports the ICMP port
// unreachable a datagram to a closed port drew by failing the next send,
// which never left, whether by sendmmsg or by a lone sendto; the link
// sends again, as an unconnected socket (which never hears of ICMP
// errors) would have, and its ID count stays right.
func TestConnectedPortICMP(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	closed := linktest.FreePort(t, "127.0.0.2") // nobody listens
	sport := link.SourcePort(0x43)
	for round := range 6 {
		pkts := linktest.Batch(4, closed)
		if round >= 3 {
			pkts = pkts[:1] // a lone datagram, sent by sendto
		}
		for i := range pkts {
			pkts[i].SrcPort = sport
		}
		if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
			t.Fatalf("round %d: WriteBatch = %d, %v; want %d, nil", round, n, err, len(pkts))
		}
	}
	if s := a.Stats(); s[stats.LinkSendErrors] != 0 || s[stats.ConnectedPorts] != 1 || s[stats.LoneSends] != 3 {
		t.Errorf("SendErrors %d, ConnectedPorts %d, LoneSends %d; want 0, 1, 3", s[stats.LinkSendErrors], s[stats.ConnectedPorts], s[stats.LoneSends])
	}
	// An ICMP error pending when the counter must be learned again fails
	// the first probe's send, which learn sends again.
	ps := a.ports.m[sport]
	for tries := 0; ; tries++ { // a write that fails reports an earlier one's ICMP error
		_, err := unix.Write(ps.sock.fd, make([]byte, 40))
		if err == nil {
			break
		}
		if tries == 3 {
			t.Fatal(err)
		}
	}
	a.wr.Lock()
	ps.ids.known = false
	a.connectPort(ps, netip.AddrPortFrom(a.LocalAddr().Addr(), sport), closed)
	a.wr.Unlock()
	if !ps.ids.known || ps.peer != closed {
		t.Fatalf("after an ICMP error: counter known %v, peer %v; want true, %v", ps.ids.known, ps.peer, closed)
	}
	// The same socket then reaches a live peer, each packet with the ID
	// the link counted.
	pkts := linktest.Batch(6, b.LocalAddr())
	for i := range pkts {
		pkts[i].SrcPort = sport
	}
	if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	ids := wantIDs(a, pkts)
	linktest.CheckReceivedIDs(t, linktest.ReadN(t, b, len(pkts)), pkts, ids, netip.AddrPortFrom(a.LocalAddr().Addr(), sport), b.LocalAddr())
}

// TestIDGuess walks the receiver's ID prediction through the senders it
// meets: goroce's unconnected sockets (every datagram from 0), connected
// Linux sockets (one ID per datagram, whatever its segments), rxe (one
// per packet), and peers that share a slot.
func TestIDGuess(t *testing.T) {
	p := linktest.MustParse("192.0.2.1:49152")
	q := linktest.MustParse("192.0.2.2:49153")
	type dg struct {
		peer       netip.AddrPort
		base, last uint16
		want       uint16 // next's guess before the datagram
	}
	for _, tc := range []struct {
		name string
		dgs  []dg
	}{
		{"unconnected, ID 0", []dg{{p, 0, 0, 0}, {p, 0, 3, 0}, {p, 0, 1, 0}, {p, 0, 0, 0}}},
		{"connected, per datagram", []dg{{p, 700, 701, 0}, {p, 701, 703, 702}, {p, 702, 702, 702}, {p, 703, 704, 703}, {p, 704, 704, 704}}},
		{"per packet (rxe)", []dg{{p, 9, 9, 0}, {p, 10, 12, 10}, {p, 13, 13, 13}, {p, 14, 15, 14}, {p, 16, 16, 16}}},
		{"wraps through 0", []dg{{p, 65534, 65534, 0}, {p, 65535, 65535, 65535}, {p, 0, 0, 0}, {p, 1, 1, 0}, {p, 2, 2, 2}}},
		{"counter jumps", []dg{{p, 100, 100, 0}, {p, 101, 101, 101}, {p, 4000, 4000, 102}, {p, 4001, 4001, 4001}}},
		{"two peers", []dg{{p, 5, 5, 0}, {q, 50, 50, 0}, {p, 6, 6, 6}, {q, 51, 51, 51}}},
		{"IPv6: always 0", []dg{{linktest.MustParse("[2001:db8::1]:1"), 0, 0, 0}, {linktest.MustParse("[2001:db8::1]:1"), 0, 0, 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g idGuess
			for i, d := range tc.dgs {
				if got := g.next(d.peer); got != d.want {
					t.Errorf("datagram %d: next(%v) = %d, want %d", i, d.peer, got, d.want)
				}
				g.note(d.peer, d.base, d.last)
			}
		})
	}
}

// TestIDRecoveries: a ping-pong between two links, each answer a
// two-packet super-packet from a connected port socket (an ib_write_lat
// message and the ACK of the peer's), costs ID recoveries only on the
// first datagrams from each peer.
func TestIDRecoveries(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	const rounds = 50
	for range rounds {
		for _, l := range []struct{ from, to *Link }{{a, b}, {b, a}} {
			pkts := linktest.Batch(2, l.to.LocalAddr()) // 36 and 37 bytes: one run
			for i := range pkts {
				pkts[i].SrcPort = link.SourcePort(0x44)
			}
			if n, err := l.from.WriteBatch(pkts); n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			linktest.ReadN(t, l.to, len(pkts))
		}
	}
	for _, l := range []*Link{a, b} {
		s := l.Stats()
		if s[stats.LinkRcvdPkts] != 2*rounds || s[stats.IDRecoveries] > 2 {
			t.Errorf("%v: %d packets received, %d IDs recovered; want %d, at most 2", l.LocalAddr(), s[stats.LinkRcvdPkts], s[stats.IDRecoveries], 2*rounds)
		}
	}
}

// wantIDs returns the IPv4 ID link a gave each of pkts, sent in one
// WriteBatch of at most link.MaxBatch packets: from the link's own port or an
// unconnected port socket, segment k of a super-packet gets k (gsoIDs);
// from a connected port socket, the IDs of its counter, counted back from
// its value after the batch (idprobe_linux.go). Without GSO every packet
// is a message of its own.
func wantIDs(a *Link, pkts []link.Packet) []uint16 {
	a.wr.Lock()
	defer a.wr.Unlock()
	a.ports.Lock()
	defer a.ports.Unlock()
	counter := func(i int) *idCount {
		if ps := a.ports.m[pkts[i].SrcPort]; ps != nil && ps.peer.Addr().Is4() && ps.ids.known && pkts[i].SrcPort != a.laddr.Port() {
			return &ps.ids
		}
		return nil
	}
	runs := func(each func(i, n int)) {
		for i := 0; i < len(pkts); {
			n := 1
			if a.wr.gso {
				n = gsoRun(pkts[i:], maxSegments, maxGSOBytes(pkts[i].Peer.Addr().Is6()))
			}
			each(i, n)
			i += n
		}
	}
	// Count each counter back over the batch's messages, then forward.
	start := map[*idCount]idCount{}
	runs(func(i, n int) {
		if c := counter(i); c != nil {
			back, ok := start[c]
			if !ok {
				back = *c
			}
			if c.perSeg {
				back.next -= uint16(n)
			} else {
				back.next--
			}
			start[c] = back
		}
	})
	ids := make([]uint16, len(pkts))
	runs(func(i, n int) {
		c := counter(i)
		var base uint16
		if c != nil {
			at := start[c]
			base = at.next
			at.advance(n)
			start[c] = at
		}
		for k := range n {
			ids[i+k] = base + uint16(k)
		}
	})
	return ids
}

// TestIDProbeIgnoresStrays: datagrams from elsewhere that reach the probe
// socket while a counter is learned, whatever their first byte, do not
// pass for probes.
func TestIDProbeIgnoresStrays(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, probeA, probeB)
	a.wr.Lock()
	ok := a.openProbe()
	a.wr.Unlock()
	if !ok {
		t.Fatal("no probe socket")
	}
	stray, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(stray)
	to := a.wr.probe.to
	stop := make(chan struct{})
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		msg := make([]byte, probeLen)
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			msg[0] = byte(n)
			err := unix.Sendto(stray, msg, 0, &to)
			if err != nil && err != unix.EAGAIN {
				done <- err
				return
			}
			if n == 100 {
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatal(err)
	}
	// Source ports of 20 QPNs, none a's own port (a free port from the
	// same range, which portSocket answers with the link's socket).
	var sports []uint16
	for qpn := uint32(0x50); len(sports) < 20; qpn++ {
		if sp := link.SourcePort(qpn); sp != a.LocalAddr().Port() {
			sports = append(sports, sp)
		}
	}
	var ports []*portSocket
	for _, sp := range sports {
		ps, _ := connectedPort(t, a, sp, b.LocalAddr())
		ports = append(ports, ps)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, ps := range ports {
		if !ps.ids.known {
			t.Fatalf("port socket %d: counter not learned", i)
		}
		want := ps.ids.next
		src := netip.AddrPortFrom(a.LocalAddr().Addr(), sports[i])
		a.wr.probe.drain()
		if low := lowBytes(t, a, ps.sock.fd, src, 1, 1)[0]; low != byte(want) {
			t.Errorf("port socket %d: next ID's low byte %#02x, learned %#02x", i, low, byte(want))
		}
	}
}
