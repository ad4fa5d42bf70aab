//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// sameHostPair opens two links with the same-host path on free ports of
// 127.0.0.1 and 127.0.0.2.
func sameHostPair(t *testing.T) (*Mux, *Mux) {
	t.Helper()
	return muxPair(t, Config{})
}

// TestSameHost: packets between two same-host links go through the ring,
// both ways, arrive whole with the source address and port (a per-QP port
// included) that UDP would have shown and a correct ICRC, and the reader
// that waits for them is woken by the doorbell.
func TestSameHost(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := sameHostPair(t)
	for _, dir := range []struct {
		name     string
		from, to *Mux
	}{{"a→b", a, b}, {"b→a", b, a}} {
		t.Run(dir.name, func(t *testing.T) {
			before := dir.from.Stats()[stats.SameHostPkts]
			sent := linktest.Batch(12, dir.to.LocalAddr())
			if n, err := dir.from.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			linktest.CheckReceived(t, linktest.ReadN(t, dir.to, len(sent)), sent, dir.from.LocalAddr(), dir.to.LocalAddr())
			if got := dir.from.Stats()[stats.SameHostPkts] - before; got != uint64(len(sent)) {
				t.Errorf("SameHostSent grew by %d, want %d", got, len(sent))
			}

			// A packet from a per-QP source port shows that port.
			p := linktest.Batch(1, dir.to.LocalAddr())
			p[0].SrcPort = link.SourcePort(9)
			dir.from.WriteBatch(p)
			got := linktest.ReadN(t, dir.to, 1)
			linktest.CheckReceived(t, got, p, netip.AddrPortFrom(dir.from.LocalAddr().Addr(), link.SourcePort(9)), dir.to.LocalAddr())

			// A reader already waiting is woken.
			errc := make(chan error, 1)
			go func() {
				bufs := linktest.ReadBufs(4)
				n, err := dir.to.ReadBatch(bufs)
				if err == nil && n != 1 {
					err = errors.New("ReadBatch returned " + strconv.Itoa(n) + " packets, want 1")
				}
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			dir.from.WriteBatch(linktest.Batch(1, dir.to.LocalAddr()))
			if err := linktest.WaitErr(t, errc); err != nil {
				t.Fatal(err)
			}
		})
	}
	if s := a.Stats(); s[stats.SameHostDrops] != 0 || s[stats.ICRCErrors] != 0 || s[stats.LinkMalformed] != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestSameHostSlotWidth: the sender times trials of both slot widths
// (slotWidth) as it sends batches with large packets, and every packet
// arrives whole whichever width sent it.
func TestSameHostSlotWidth(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := sameHostPair(t)
	to := b.LocalAddr()
	const batches = widthEvery + 2*widthTrial
	trials, wides := 0, 0
	for range batches {
		sent := linktest.Batch(6, to) // sizes 0 to 4096, three of a KiB or more
		a.writeMu.Lock()
		o := a.out[to]
		var w slotWidth
		if o != nil {
			w = o.width
		}
		a.writeMu.Unlock()
		if wide, timed := w.next(); timed {
			trials++
			if wide {
				wides++
			}
		}
		if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		linktest.CheckReceived(t, linktest.ReadN(t, b, len(sent)), sent, a.LocalAddr(), to)
	}
	if trials < widthTrial || wides < widthTrial/2 {
		t.Errorf("%d timed batches, %d of them wide, in %d: want a trial of %d, half wide", trials, wides, batches, widthTrial)
	}
	if s := a.Stats(); s[stats.SameHostPkts] != 6*batches || s[stats.SameHostDrops] != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestSameHostStaleRing: a producer may clear a consumer's "waiting" flag
// and ring its doorbell late, after the consumer has woken for another
// reason and gone to wait again. That ring wakes the new wait for nothing;
// the consumer must set its flag again before it sleeps on, or the next
// packet would never ring it.
func TestSameHostStaleRing(t *testing.T) {
	a, b := sameHostPair(t)
	a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	linktest.ReadN(t, b, 1)
	o := a.out[b.LocalAddr()]
	errc := make(chan error, 1)
	go func() {
		n, err := b.ReadBatch(linktest.ReadBufs(4))
		if err == nil && n != 1 {
			err = errors.New("ReadBatch returned " + strconv.Itoa(n) + " packets, want 1")
		}
		errc <- err
	}()
	waitFlag := func(want uint32) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Second); o.ring.u32(shmOffWaiting).Load() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("waiting flag %d, want %d", o.ring.u32(shmOffWaiting).Load(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitFlag(1) // the reader waits
	// The late producer: flag cleared, doorbell rung, nothing new in the ring.
	if !o.ring.u32(shmOffWaiting).CompareAndSwap(1, 0) {
		t.Fatal("flag not set")
	}
	signal(o.doorbell)
	waitFlag(1) // the reader woke, found nothing, and is waiting again
	select {
	case err := <-errc:
		t.Fatalf("ReadBatch returned on a ring without packets: %v", err)
	default:
	}
	a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	if err := linktest.WaitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestSameHostRingResident: a channel's ring is mapped in full on both
// sides once it opens, so that no packet waits for a page fault.
func TestSameHostRingResident(t *testing.T) {
	a, b := sameHostPair(t)
	a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	linktest.ReadN(t, b, 1)
	b.readMu.Lock()
	in := b.in[0].ring.mem
	b.readMu.Unlock()
	for _, m := range []struct {
		side string
		mem  []byte
	}{{"producer", a.out[b.LocalAddr()].ring.mem}, {"consumer", in}} {
		if rss := mappedKiB(t, m.mem); rss < shmRingSize/1024 {
			t.Errorf("%s: %d KiB of the %d KiB ring mapped", m.side, rss, shmRingSize/1024)
		}
	}
}

// mappedKiB returns the resident size (Rss in /proc/self/smaps) of the
// mapping that starts at mem.
func mappedKiB(t *testing.T, mem []byte) int {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	start := strconv.FormatUint(uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem)))), 16)
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.Contains(f[0], "-") {
			lo, _, _ := strings.Cut(f[0], "-")
			in = strings.TrimLeft(lo, "0") == start
			continue
		}
		if kb, ok := strings.CutPrefix(line, "Rss:"); in && ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")))
			return n
		}
	}
	t.Fatalf("no mapping at 0x%s in /proc/self/smaps", start)
	return 0
}

// TestSameHostLent: ReadLent lends ring slots, and they go back to the
// producer only with ReturnLent; PollBatch reads the rings without waiting.
func TestSameHostLent(t *testing.T) {
	a, b := sameHostPair(t)
	sent := linktest.Batch(6, b.LocalAddr())
	a.WriteBatch(sent)
	bufs := linktest.ReadBufs(link.MaxBatch)
	n, err := b.ReadLent(bufs, true)
	if n != len(sent) || err != nil {
		t.Fatalf("ReadLent = %d, %v", n, err)
	}
	for i := range n {
		if bufs[i].Lent == nil || len(bufs[i].Lent) != len(sent[i].Buf) || string(bufs[i].Lent[:len(bufs[i].Lent)-4]) != string(sent[i].Buf[:len(sent[i].Buf)-4]) {
			t.Fatalf("packet %d: not lent, or lent with other contents", i)
		}
	}
	ring := a.out[b.LocalAddr()].ring
	if head := ring.u64(shmOffHead).Load(); head != 0 {
		t.Errorf("consumer index %d while the slots are lent, want 0", head)
	}
	b.ReturnLent()
	if head := ring.u64(shmOffHead).Load(); head != uint64(len(sent)) {
		t.Errorf("consumer index %d after ReturnLent, want %d", head, len(sent))
	}
	if n, err := b.PollBatch(bufs); n != 0 || err != nil {
		t.Fatalf("PollBatch on empty rings = %d, %v", n, err)
	}
	a.WriteBatch(linktest.Batch(2, b.LocalAddr()))
	if n, err := b.PollBatch(bufs); n != 2 || err != nil {
		t.Fatalf("PollBatch = %d, %v, want 2", n, err)
	}
	if w := ring.u32(shmOffWaiting).Load(); w != 0 {
		t.Errorf("a poller left the waiting flag at %d", w)
	}
}

// TestSameHostRingFull: a full ring drops what does not fit and counts it,
// and the slots that were filled are all read.
func TestSameHostRingFull(t *testing.T) {
	a, b := sameHostPair(t)
	pkts := linktest.Batch(link.MaxBatch, b.LocalAddr())
	total := 0
	for total < shmSlots+link.MaxBatch {
		n, err := a.WriteBatch(pkts)
		if n != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		total += n
	}
	if s := a.Stats(); s[stats.SameHostPkts] != shmSlots || s[stats.SameHostDrops] != uint64(total-shmSlots) {
		t.Errorf("SameHostSent %d, SameHostDrops %d; want %d and %d", s[stats.SameHostPkts], s[stats.SameHostDrops], shmSlots, total-shmSlots)
	}
	linktest.ReadN(t, b, shmSlots)
	if n, _ := b.PollBatch(linktest.ReadBufs(4)); n != 0 {
		t.Errorf("%d packets beyond the ring's %d", n, shmSlots)
	}
}

// TestSameHostBadRing: what a producer writes into shared memory is not
// trusted. A slot with an impossible length or a wrong ICRC is counted and
// skipped; a producer index that jumps past the ring ends the channel.
func TestSameHostBadRing(t *testing.T) {
	a, b := sameHostPair(t)
	a.WriteBatch(linktest.Batch(3, b.LocalAddr()))
	o := a.out[b.LocalAddr()]
	binary.LittleEndian.PutUint32(o.ring.slot(0), link.MaxPacket+1) // length
	o.ring.slot(1)[shmSlotHdr+12]++                                 // its payload byte: the ICRC fails
	got := linktest.ReadN(t, b, 1)
	if len(got) != 1 {
		t.Fatalf("%d packets", len(got))
	}
	if s := b.Stats(); s[stats.LinkMalformed] != 1 || s[stats.ICRCErrors] != 1 {
		t.Errorf("Malformed %d, ICRCErrors %d; want 1 and 1", s[stats.LinkMalformed], s[stats.ICRCErrors])
	}
	o.ring.u64(shmOffTail).Store(o.tail + 5*shmSlots)
	if n, err := b.PollBatch(linktest.ReadBufs(4)); n != 0 || err != nil {
		t.Fatalf("PollBatch = %d, %v", n, err)
	}
	if len(b.in) != 0 {
		t.Errorf("the channel of a producer that jumped is still read")
	}
	if o.ring.u32(shmOffClosed).Load() != 1 {
		t.Errorf("the ring of an ended channel is not marked closed")
	}
}

// TestSameHostDeferredICRC: with DeferICRC, lent ring packets come with
// their ICRC pending and a seed that finishes the check (wire.
// CheckDeferredICRC): right for intact packets, wrong for a damaged one,
// which the link leaves to the borrower to count. Copied packets are
// still checked by the link.
func TestSameHostDeferredICRC(t *testing.T) {
	a, b := muxPair(t, Config{DeferICRC: true})
	if b.Caps()&link.CapDeferICRC == 0 {
		t.Fatal("a same-host link with DeferICRC does not declare link.CapDeferICRC")
	}
	a.WriteBatch(linktest.Batch(3, b.LocalAddr()))
	o := a.out[b.LocalAddr()]
	o.ring.slot(1)[shmSlotHdr+12]++ // a payload byte of the second packet
	bufs := linktest.ReadBufs(link.MaxBatch)
	n, err := b.ReadLent(bufs, true)
	if n != 3 || err != nil {
		t.Fatalf("ReadLent = %d, %v; want 3 packets, the damaged one among them", n, err)
	}
	for i, p := range bufs[:n] {
		if !p.ICRCPending || p.Lent == nil {
			t.Fatalf("packet %d: pending %v, lent %v", i, p.ICRCPending, p.Lent != nil)
		}
		if ok := wire.CheckDeferredICRC(p.Lent, p.ICRCSeed); ok != (i != 1) {
			t.Errorf("packet %d: deferred check %v", i, ok)
		}
	}
	b.ReturnLent()
	if s := b.Stats(); s[stats.ICRCErrors] != 0 {
		t.Errorf("ICRCErrors %d for a check left to the borrower", s[stats.ICRCErrors])
	}

	a.WriteBatch(linktest.Batch(2, b.LocalAddr()))
	o.ring.slot(3)[shmSlotHdr+12]++ // the first of these two
	got := linktest.ReadN(t, b, 1)
	if got[0].ICRCPending {
		t.Error("a copied packet came with its ICRC pending")
	}
	if s := b.Stats(); s[stats.ICRCErrors] != 1 {
		t.Errorf("ICRCErrors %d after ReadBatch met a damaged packet, want 1", s[stats.ICRCErrors])
	}
}

// TestSameHostAllocs: a round trip through a ring allocates nothing.
func TestSameHostAllocs(t *testing.T) {
	a, b := sameHostPair(t)
	pkts := linktest.Batch(64, b.LocalAddr())
	linktest.CheckRoundTripAllocs(t, a, b, pkts, b.ReadBatch)
}

// BenchmarkSameHost streams batches of equal packets through a same-host
// ring, the writer and the reader on goroutines of their own (on a
// machine with two or more CPUs, on two cores: the ring's lines move
// between them as they do between two processes).
func BenchmarkSameHost(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			x, y := muxPair(b, Config{})
			linktest.Stream(b, x, y, size)
			if s := x.Stats(); s[stats.SameHostPkts] == 0 {
				b.Fatalf("nothing went through the ring: %+v", s)
			}
		})
	}
}

// TestSameHostSocketPolls: with a same-host channel open, a poller looks
// at its socket on one read in shmSocketPolls, whether the reads between
// found ring packets or not, so that a ping-pong's message a read does not
// cost a system call each; and a datagram waiting on the socket is read
// within that many reads while the ring always has a packet.
func TestSameHostSocketPolls(t *testing.T) {
	a, b := sameHostPair(t)
	to := b.LocalAddr()
	// The first packet opens the channel.
	a.WriteBatch(linktest.Batch(1, to))
	linktest.ReadN(t, b, 1)
	linktest.WaitFor(t, "a same-host channel", func() bool {
		a.WriteBatch(linktest.Batch(1, to))
		linktest.ReadN(t, b, 1)
		return a.Stats()[stats.SameHostPkts] > 0
	})
	bufs := linktest.ReadBufs(link.MaxBatch)
	// readOne writes one packet to the ring and polls b until a read
	// returns something, which it returns.
	readOne := func(write bool) []link.Packet {
		t.Helper()
		if write {
			if n, err := a.WriteBatch(linktest.Batch(1, to)); n != 1 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			for i := range bufs {
				bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
			}
			n, err := b.PollBatch(bufs)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return bufs[:n]
			}
		}
		t.Fatal("nothing to read")
		return nil
	}

	// A ping-pong: one ring packet for each read.
	const reads = 10 * shmSocketPolls
	before := b.socketPolls
	for range reads {
		if got := readOne(true); len(got) != 1 || got[0].Peer != a.LocalAddr() {
			t.Fatalf("read %d packets, the first from %v; want 1 from %v", len(got), got[0].Peer, a.LocalAddr())
		}
	}
	if polls := b.socketPolls - before; polls < reads/shmSocketPolls-1 || polls > reads/shmSocketPolls+1 {
		t.Errorf("%d reads with a ring packet each looked at the socket %d times, want %d", reads, polls, reads/shmSocketPolls)
	}

	// A datagram from a link without the same-host path waits on the
	// socket while the ring has a packet for every read.
	c, err := udp.Listen(udp.Config{Addr: linktest.FreePort(t, "127.0.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n, err := c.WriteBatch(linktest.Batch(1, to)); n != 1 || err != nil {
		t.Fatalf("WriteBatch over UDP = %d, %v", n, err)
	}
	for i := 1; ; i++ {
		got := readOne(true)
		if got[0].Peer == c.LocalAddr() {
			break
		}
		if i > shmSocketPolls {
			t.Fatalf("the socket's datagram not read in %d reads with ring packets", i)
		}
	}
}

// TestMuxSegments: a same-host link does not segment for a same-host peer,
// whose ring takes its packets one by one, but does, as its UDP link
// does, for itself and for an address no same-host device listens on; it
// declares cheap writes once a channel is open.
func TestMuxSegments(t *testing.T) {
	a, b := sameHostPair(t)
	if a.Caps()&link.CapCheapWrite != 0 {
		t.Error("cheap writes before any channel opened")
	}
	if a.Segments(b.LocalAddr()) {
		t.Error("segments for a same-host peer")
	}
	elsewhere := netip.MustParseAddrPort("127.0.9.9:4791")
	if a.inner.Caps()&link.CapSegment != 0 && (!a.Segments(elsewhere) || !a.Segments(a.LocalAddr())) {
		t.Error("does not segment for peers it reaches over the socket")
	}
	linktest.WaitFor(t, "a same-host channel", func() bool {
		a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
		linktest.ReadN(t, b, 1)
		return a.Stats()[stats.SameHostPkts] > 0
	})
	if a.Caps()&(link.CapCheapWrite|link.CapLend) != link.CapCheapWrite|link.CapLend {
		t.Errorf("caps %b with a channel open, want CapCheapWrite and CapLend", a.Caps())
	}
}
