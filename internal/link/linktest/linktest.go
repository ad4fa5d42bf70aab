// Package linktest holds what the tests of every link backend share:
// packets to send, reads that wait with a deadline, the checks of what
// arrived, and leak and allocation checks.
package linktest

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/wire"
)

// WaitFor polls cond until it holds, failing the test after 10 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// CheckNoLeaks fails the test if it ends with more goroutines than it began.
func CheckNoLeaks(t testing.TB) {
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

// BuildPacket writes an RC SEND ONLY packet to qpn with psn and a payload of
// n bytes derived from seed into b, with room for the ICRC, and returns it.
func BuildPacket(b []byte, qpn, psn uint32, n int, seed byte) []byte {
	payload := make([]byte, n)
	for i := range payload {
		payload[i] = seed + byte(i*7)
	}
	h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpSendOnly, PKey: wire.DefaultPKey, DestQP: qpn, PSN: psn}}
	return b[:wire.Build(b, &h, payload)]
}

// batch returns count packets of various sizes (up to a 4096-byte payload)
// addressed to peer, each in its own buffer of capacity link.MaxPacket.
func Batch(count int, peer netip.AddrPort) []link.Packet {
	pkts := make([]link.Packet, count)
	for i := range pkts {
		size := []int{0, 1, 64, 1000, 1024, 4096}[i%6]
		pkts[i] = link.Packet{Buf: BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), size, byte(i)), Peer: peer}
	}
	return pkts
}

// ReadBufs returns count empty packets with buffers of capacity link.MaxPacket.
func ReadBufs(count int) []link.Packet {
	pkts := make([]link.Packet, count)
	for i := range pkts {
		pkts[i].Buf = make([]byte, 0, link.MaxPacket)
	}
	return pkts
}

// ReadN reads from l until it has n packets, failing the test after a
// timeout. The packets are copies.
func ReadN(t testing.TB, l link.Link, n int) []link.Packet {
	t.Helper()
	type result struct {
		pkts []link.Packet
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var got []link.Packet
		bufs := ReadBufs(link.MaxBatch)
		for len(got) < n {
			k, err := l.ReadBatch(bufs[:min(len(bufs), n-len(got))])
			if err != nil {
				done <- result{got, err}
				return
			}
			for _, p := range bufs[:k] {
				got = append(got, link.Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer})
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

// CheckReceived verifies that got carries sent's packets in order, from
// from, each with the ICRC the sender would compute for those addresses,
// over IPv4 ID 0.
func CheckReceived(t testing.TB, got, sent []link.Packet, from netip.AddrPort, to netip.AddrPort) {
	t.Helper()
	CheckReceivedIDs(t, got, sent, make([]uint16, len(sent)), from, to)
}

// CheckReceivedIDs is CheckReceived with the IDs sent[i] may carry besides
// 0 given in ids[i].
func CheckReceivedIDs(t testing.TB, got, sent []link.Packet, ids []uint16, from netip.AddrPort, to netip.AddrPort) {
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
		f := link.SendFields(from, to)
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

// WantClosed fails unless err is net.ErrClosed.
func WantClosed(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, net.ErrClosed) {
		t.Errorf("%s: err = %v, want net.ErrClosed", what, err)
	}
}

func MustParse(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// CheckRoundTripAllocs writes pkts from a and reads them all back at b with
// read, once to warm up (sockets, buffers), and then fails the test if a
// round allocates.
func CheckRoundTripAllocs(t *testing.T, a, b link.Link, pkts []link.Packet, read func([]link.Packet) (int, error)) {
	t.Helper()
	bufs := ReadBufs(len(pkts))
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

// PollN polls l with bufs until it has n packets, for up to 5 s, and
// returns copies of them (buffer, peer, CE mark).
func PollN(t testing.TB, l link.Link, bufs []link.Packet, n int) []link.Packet {
	t.Helper()
	var got []link.Packet
	for deadline := time.Now().Add(5 * time.Second); len(got) < n && time.Now().Before(deadline); {
		k, err := l.PollBatch(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:k] {
			got = append(got, link.Packet{Buf: append([]byte(nil), p.Buf...), Peer: p.Peer, CE: p.CE})
		}
		for i := range bufs {
			bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
		}
	}
	return got
}

// WaitErr waits for the error a call blocked in a link reports once Close
// unblocks it, failing the test after 5 s.
func WaitErr(t testing.TB, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock the call")
		return nil
	}
}

// ReadUntil reads from l until done says the packets so far are enough,
// failing the test after 10 s. It returns copies, CE included.
func ReadUntil(t testing.TB, l link.Link, done func([]link.Packet) bool) []link.Packet {
	t.Helper()
	type result struct {
		pkts []link.Packet
		err  error
	}
	res := make(chan result, 1)
	go func() {
		var got []link.Packet
		bufs := ReadBufs(link.MaxBatch)
		for !done(got) {
			k, err := l.ReadBatch(bufs)
			if err != nil {
				res <- result{got, err}
				return
			}
			for _, p := range bufs[:k] {
				got = append(got, link.Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer, CE: p.CE})
			}
		}
		res <- result{got, nil}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("ReadBatch after %d packets: %v", len(r.pkts), r.err)
		}
		return r.pkts
	case <-time.After(10 * time.Second):
		l.Close()
		r := <-res
		t.Fatalf("timed out after %d packets", len(r.pkts))
		return nil
	}
}

// Stream measures one-way throughput from a to r, and closes a: one goroutine writes
// batches of 64 packets with a payload of size bytes until the reader has
// received b.N packets. b.N counts received packets, so MB/s is the
// delivered rate of UDP payload (BTH through ICRC).
func Stream(b *testing.B, a, r link.Link, size int) {
	pkts := Batch(64, r.LocalAddr())
	for i := range pkts {
		pkts[i].Buf = BuildPacket(pkts[i].Buf[:cap(pkts[i].Buf)], 0x11, uint32(i), size, byte(i))
	}
	b.SetBytes(int64(len(pkts[0].Buf)))
	b.ReportAllocs()
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	b.ResetTimer()
	start := time.Now()
	go func() {
		defer wg.Done()
		for !done.Load() {
			_, err := a.WriteBatch(pkts)
			if err != nil {
				if !done.Load() {
					b.Error(err)
					r.Close() // unblocks the reader
				}
				return
			}
		}
	}()
	bufs := ReadBufs(link.MaxBatch)
	for got := 0; got < b.N; {
		n, err := r.ReadBatch(bufs)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
	elapsed := time.Since(start)
	done.Store(true)
	b.StopTimer()
	a.Close() // unblocks a writer waiting for room
	wg.Wait()
	b.ReportMetric(float64(b.N)/elapsed.Seconds()/1e6, "Mpps")
}

// FreePort returns a UDP port on ip that was free a moment ago, skipping
// the test where ip has no UDP: tests never use 4791, so they run beside a
// real device.
func FreePort(t testing.TB, ip string) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(ip), 0)))
	if err != nil {
		t.Skipf("no UDP on %s: %v", ip, err)
	}
	defer c.Close()
	return link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
}
