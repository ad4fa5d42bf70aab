package link

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// checkNoLeaks fails the test if it ends with more goroutines than it began.
func checkNoLeaks(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutines: %d at start, %d at end:\n%s", before, runtime.NumGoroutine(), buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// buildPacket writes an RC SEND ONLY packet to qpn with psn and a payload of
// n bytes derived from seed into b, with room for the ICRC, and returns it.
func buildPacket(b []byte, qpn, psn uint32, n int, seed byte) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = seed + byte(i*7)
	}
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn}}
	return b[:wire.Build(b, &h, payload)]
}

// batch returns count packets of various sizes (up to a 4096-byte payload)
// addressed to peer, each in its own buffer of capacity MaxPacket.
func batch(count int, peer netip.AddrPort) []Packet {
	pkts := make([]Packet, count)
	for i := range pkts {
		size := []int{0, 1, 64, 1000, 1024, 4096}[i%6]
		pkts[i] = Packet{Buf: buildPacket(make([]byte, MaxPacket), 0x11, uint32(i), size, byte(i)), Peer: peer}
	}
	return pkts
}

// readBufs returns count empty packets with buffers of capacity MaxPacket.
func readBufs(count int) []Packet {
	pkts := make([]Packet, count)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 0, MaxPacket)
	}
	return pkts
}

// readN reads from l until it has n packets, failing the test after a
// timeout. The packets are copies.
func readN(t testing.TB, l Link, n int) []Packet {
	t.Helper()
	type result struct {
		pkts []Packet
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got []Packet
		bufs := readBufs(MaxBatch)
		for len(got) < n {
			k, err := l.ReadBatch(bufs[:min(len(bufs), n-len(got))])
			if err != nil {
				done <- result{got, err}
				return
			}
			for _, p := range bufs[:k] {
				got = append(got, Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer})
			}
		}
		done <- result{got, nil}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("ReadBatch after %d of %d packets: %v", len(r.pkts), n, r.err)
		}
		return r.pkts
	case <-time.After(10 * time.Second):
		l.Close() // unblocks the reader, which then reports the error
		r := <-done
		t.Fatalf("timed out: %d of %d packets arrived", len(r.pkts), n)
		return nil
	}
}

// checkReceived verifies that got carries sent's packets in order, from
// from, each with the ICRC the sender would compute for those addresses:
// over IPv4 ID 0, or the ID a GSO link gives it (gsoIDs).
func checkReceived(t testing.TB, got, sent []Packet, from netip.AddrPort, to netip.AddrPort) {
	t.Helper()
	checkReceivedIDs(t, got, sent, gsoIDs(sent), from, to)
}

// checkReceivedIDs is checkReceived with the IDs sent[i] may carry besides
// 0 given in ids[i].
func checkReceivedIDs(t testing.TB, got, sent []Packet, ids []uint16, from netip.AddrPort, to netip.AddrPort) {
	t.Helper()
	if len(got) != len(sent) {
		t.Fatalf("got %d packets, want %d", len(got), len(sent))
	}
	for i := range got {
		// The ICRC is checked below: a link need not fill it into the
		// sender's buffer (the same-host path writes it into the ring).
		if len(got[i].Buf) != len(sent[i].Buf) || !bytes.Equal(got[i].Buf[:len(got[i].Buf)-4], sent[i].Buf[:len(sent[i].Buf)-4]) {
			t.Errorf("packet %d: contents differ (len %d, want %d)", i, len(got[i].Buf), len(sent[i].Buf))
		}
		if got[i].Peer != from {
			t.Errorf("packet %d: Peer = %v, want %v", i, got[i].Peer, from)
		}
		f := sendFields(from, to)
		body := got[i].Buf[:len(got[i].Buf)-4]
		c, s := f.ICRC(body), wire.StoredICRC(got[i].Buf)
		if c == s {
			continue
		}
		if f.Src.Is4() {
			f.ID = ids[i]
			if f.ICRC(body) == s {
				continue
			}
		}
		t.Errorf("packet %d: ICRC %08x, want %08x (ID 0, DF) or with ID %d", i, s, c, ids[i])
	}
}

// gsoIDs returns the IPv4 ID a link sending with GSO gives each of pkts,
// sent in one WriteBatch (of at most MaxBatch packets): segment k of a run
// gets k.
func gsoIDs(pkts []Packet) []uint16 {
	ids := make([]uint16, len(pkts))
	for i := 0; i < len(pkts); {
		n := gsoRun(pkts[i:], maxSegments, maxGSOBytes(pkts[i].Peer.Addr().Is6()))
		for k := range n {
			ids[i+k] = uint16(k)
		}
		i += n
	}
	return ids
}

// wantClosed fails unless err is net.ErrClosed.
func wantClosed(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: err = %v, want net.ErrClosed", what, err)
	}
}

func mustParse(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// freePort returns a UDP port on ip that was free a moment ago: tests never
// use 4791, so they run beside a real device.
func freePort(t testing.TB, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Skipf("no UDP on %s: %v", ip, err)
	}
	defer c.Close()
	return plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
}

// udpPair opens two UDP links on free ports of the two IPs.
func udpPair(t testing.TB, ipA, ipB string) (*UDP, *UDP) {
	t.Helper()
	return udpPairConfig(t, ipA, ipB, UDPConfig{})
}

// udpPairConfig is udpPair with cfg for both links (cfg.Addr is set here).
func udpPairConfig(t testing.TB, ipA, ipB string, cfg UDPConfig) (*UDP, *UDP) {
	t.Helper()
	cfg.Addr = freePort(t, ipA)
	a, err := ListenUDP(cfg)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = freePort(t, ipB)
	b, err := ListenUDP(cfg)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// checkRoundTripAllocs writes pkts from a and reads them all back at b with
// read, once to warm up (sockets, buffers), and then fails the test if a
// round allocates.
func checkRoundTripAllocs(t *testing.T, a, b Link, pkts []Packet, read func([]Packet) (int, error)) {
	t.Helper()
	bufs := readBufs(len(pkts))
	round := func() {
		if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		for got := 0; got < len(pkts); {
			n, err := read(bufs[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round()
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%v allocations per batch of %d, want 0", allocs, len(pkts))
	}
}
