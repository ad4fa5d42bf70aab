//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/wire"
)

// sameHostPair opens two links with the same-host path on free ports of
// 127.0.0.1 and 127.0.0.2.
func sameHostPair(t *testing.T) (*UDP, *UDP) {
	t.Helper()
	return udpPairConfig(t, "127.0.0.1", "127.0.0.2", UDPConfig{SameHost: true})
}

// TestSameHost: packets between two same-host links go through the ring,
// both ways, arrive whole with the source address and port (a per-QP port
// included) that UDP would have shown and a correct ICRC, and the reader
// that waits for them is woken by the doorbell.
func TestSameHost(t *testing.T) {
	checkNoLeaks(t)
	a, b := sameHostPair(t)
	for _, dir := range []struct {
		name     string
		from, to *UDP
	}{{"a→b", a, b}, {"b→a", b, a}} {
		t.Run(dir.name, func(t *testing.T) {
			before := dir.from.Stats().SameHostSent
			sent := batch(12, dir.to.LocalAddr())
			if n, err := dir.from.WriteBatch(sent); n != len(sent) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			checkReceived(t, readN(t, dir.to, len(sent)), sent, dir.from.LocalAddr(), dir.to.LocalAddr())
			if got := dir.from.Stats().SameHostSent - before; got != uint64(len(sent)) {
				t.Errorf("SameHostSent grew by %d, want %d", got, len(sent))
			}

			// A packet from a per-QP source port shows that port.
			p := batch(1, dir.to.LocalAddr())
			p[0].SrcPort = SourcePort(9)
			dir.from.WriteBatch(p)
			got := readN(t, dir.to, 1)
			checkReceived(t, got, p, netip.AddrPortFrom(dir.from.LocalAddr().Addr(), SourcePort(9)), dir.to.LocalAddr())

			// A reader already waiting is woken.
			errc := make(chan error, 1)
			go func() {
				bufs := readBufs(4)
				n, err := dir.to.ReadBatch(bufs)
				if err == nil && n != 1 {
					err = errors.New("ReadBatch returned " + strconv.Itoa(n) + " packets, want 1")
				}
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			dir.from.WriteBatch(batch(1, dir.to.LocalAddr()))
			if err := waitErr(t, errc); err != nil {
				t.Fatal(err)
			}
		})
	}
	if s := a.Stats(); s.SameHostDrops != 0 || s.ICRCErrors != 0 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestSameHostSlotWidth: the sender times trials of both slot widths
// (slotWidth) as it sends batches with large packets, and every packet
// arrives whole whichever width sent it.
func TestSameHostSlotWidth(t *testing.T) {
	checkNoLeaks(t)
	a, b := sameHostPair(t)
	to := b.LocalAddr()
	const batches = widthEvery + 2*widthTrial
	trials, wides := 0, 0
	for range batches {
		sent := batch(6, to) // sizes 0 to 4096, three of a KiB or more
		a.writeMu.Lock()
		o := a.sh.out[to]
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
		checkReceived(t, readN(t, b, len(sent)), sent, a.LocalAddr(), to)
	}
	if trials < widthTrial || wides < widthTrial/2 {
		t.Errorf("%d timed batches, %d of them wide, in %d: want a trial of %d, half wide", trials, wides, batches, widthTrial)
	}
	if s := a.Stats(); s.SameHostSent != 6*batches || s.SameHostDrops != 0 {
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
	a.WriteBatch(batch(1, b.LocalAddr()))
	readN(t, b, 1)
	o := a.sh.out[b.LocalAddr()]
	errc := make(chan error, 1)
	go func() {
		n, err := b.ReadBatch(readBufs(4))
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
	a.WriteBatch(batch(1, b.LocalAddr()))
	if err := waitErr(t, errc); err != nil {
		t.Fatal(err)
	}
}

// TestSameHostRingResident: a channel's ring is mapped in full on both
// sides once it opens, so that no packet waits for a page fault.
func TestSameHostRingResident(t *testing.T) {
	a, b := sameHostPair(t)
	a.WriteBatch(batch(1, b.LocalAddr()))
	readN(t, b, 1)
	b.readMu.Lock()
	in := b.sh.in[0].ring.mem
	b.readMu.Unlock()
	for _, m := range []struct {
		side string
		mem  []byte
	}{{"producer", a.sh.out[b.LocalAddr()].ring.mem}, {"consumer", in}} {
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
	sent := batch(6, b.LocalAddr())
	a.WriteBatch(sent)
	bufs := readBufs(MaxBatch)
	n, err := b.ReadLent(bufs, true)
	if n != len(sent) || err != nil {
		t.Fatalf("ReadLent = %d, %v", n, err)
	}
	for i := range n {
		if bufs[i].Lent == nil || len(bufs[i].Lent) != len(sent[i].Buf) || string(bufs[i].Lent[:len(bufs[i].Lent)-4]) != string(sent[i].Buf[:len(sent[i].Buf)-4]) {
			t.Fatalf("packet %d: not lent, or lent with other contents", i)
		}
	}
	ring := a.sh.out[b.LocalAddr()].ring
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
	a.WriteBatch(batch(2, b.LocalAddr()))
	if n, err := b.PollBatch(bufs); n != 2 || err != nil {
		t.Fatalf("PollBatch = %d, %v, want 2", n, err)
	}
	if w := ring.u32(shmOffWaiting).Load(); w != 0 {
		t.Errorf("a poller left the waiting flag at %d", w)
	}
}

// TestSameHostFallback: a peer without the same-host path, or on another
// address family, is reached over UDP.
func TestSameHostFallback(t *testing.T) {
	a, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.1"), SameHost: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := batch(6, c.LocalAddr())
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	checkReceived(t, readN(t, c, len(sent)), sent, a.LocalAddr(), c.LocalAddr())
	if s := a.Stats(); s.SameHostSent != 0 || s.SentPackets != uint64(len(sent)) {
		t.Errorf("SameHostSent %d, SentPackets %d; want 0 and %d", s.SameHostSent, s.SentPackets, len(sent))
	}
}

// TestSameHostPeerCloses: when the receiving link closes, the sender sees
// the ring closed and sends over UDP again, to whoever holds the address
// next.
func TestSameHostPeerCloses(t *testing.T) {
	a, b := sameHostPair(t)
	addr := b.LocalAddr()
	a.WriteBatch(batch(1, addr))
	readN(t, b, 1)
	b.Close()
	b2, err := ListenUDP(UDPConfig{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	sent := batch(3, addr)
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	checkReceived(t, readN(t, b2, len(sent)), sent, a.LocalAddr(), addr)
	if s := a.Stats(); s.SameHostSent != 1 {
		t.Errorf("SameHostSent = %d, want 1 (the packet before the close)", s.SameHostSent)
	}
}

// TestSameHostRingFull: a full ring drops what does not fit and counts it,
// and the slots that were filled are all read.
func TestSameHostRingFull(t *testing.T) {
	a, b := sameHostPair(t)
	pkts := batch(MaxBatch, b.LocalAddr())
	total := 0
	for total < shmSlots+MaxBatch {
		n, err := a.WriteBatch(pkts)
		if n != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		total += n
	}
	if s := a.Stats(); s.SameHostSent != shmSlots || s.SameHostDrops != uint64(total-shmSlots) {
		t.Errorf("SameHostSent %d, SameHostDrops %d; want %d and %d", s.SameHostSent, s.SameHostDrops, shmSlots, total-shmSlots)
	}
	readN(t, b, shmSlots)
	if n, _ := b.PollBatch(readBufs(4)); n != 0 {
		t.Errorf("%d packets beyond the ring's %d", n, shmSlots)
	}
}

// TestSameHostBadRing: what a producer writes into shared memory is not
// trusted. A slot with an impossible length or a wrong ICRC is counted and
// skipped; a producer index that jumps past the ring ends the channel.
func TestSameHostBadRing(t *testing.T) {
	a, b := sameHostPair(t)
	a.WriteBatch(batch(3, b.LocalAddr()))
	o := a.sh.out[b.LocalAddr()]
	binary.LittleEndian.PutUint32(o.ring.slot(0), MaxPacket+1) // length
	o.ring.slot(1)[shmSlotHdr+12]++                            // its payload byte: the ICRC fails
	got := readN(t, b, 1)
	if len(got) != 1 {
		t.Fatalf("%d packets", len(got))
	}
	if s := b.Stats(); s.Malformed != 1 || s.ICRCErrors != 1 {
		t.Errorf("Malformed %d, ICRCErrors %d; want 1 and 1", s.Malformed, s.ICRCErrors)
	}
	o.ring.u64(shmOffTail).Store(o.tail + 5*shmSlots)
	if n, err := b.PollBatch(readBufs(4)); n != 0 || err != nil {
		t.Fatalf("PollBatch = %d, %v", n, err)
	}
	if len(b.sh.in) != 0 {
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
	a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", UDPConfig{SameHost: true, DeferICRC: true})
	if b.Caps()&CapDeferICRC == 0 {
		t.Fatal("a same-host link with DeferICRC does not declare CapDeferICRC")
	}
	a.WriteBatch(batch(3, b.LocalAddr()))
	o := a.sh.out[b.LocalAddr()]
	o.ring.slot(1)[shmSlotHdr+12]++ // a payload byte of the second packet
	bufs := readBufs(MaxBatch)
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
	if s := b.Stats(); s.ICRCErrors != 0 {
		t.Errorf("ICRCErrors %d for a check left to the borrower", s.ICRCErrors)
	}

	a.WriteBatch(batch(2, b.LocalAddr()))
	o.ring.slot(3)[shmSlotHdr+12]++ // the first of these two
	got := readN(t, b, 1)
	if got[0].ICRCPending {
		t.Error("a copied packet came with its ICRC pending")
	}
	if s := b.Stats(); s.ICRCErrors != 1 {
		t.Errorf("ICRCErrors %d after ReadBatch met a damaged packet, want 1", s.ICRCErrors)
	}
}

// TestSameHostAllocs: a round trip through a ring allocates nothing.
func TestSameHostAllocs(t *testing.T) {
	a, b := sameHostPair(t)
	pkts := batch(64, b.LocalAddr())
	checkRoundTripAllocs(t, a, b, pkts, b.ReadBatch)
}

// TestSameHostClose: Close ends a reader waiting on rings and socket, and
// the link's socket file goes with it.
func TestSameHostClose(t *testing.T) {
	checkNoLeaks(t)
	a, b := sameHostPair(t)
	a.WriteBatch(batch(1, b.LocalAddr()))
	readN(t, b, 1)
	errc := make(chan error, 1)
	go func() { _, err := b.ReadBatch(readBufs(1)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	path := b.sh.path
	b.Close()
	wantClosed(t, "waiting ReadBatch", waitErr(t, errc))
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file %s after Close: %v", path, err)
	}
	a.Close()
	_, err := a.WriteBatch(batch(1, b.LocalAddr()))
	wantClosed(t, "WriteBatch after Close", err)
}

// TestSameHostUnsafeDir: a rendezvous directory that others could enter is
// refused, and so is SameHost with a fault stage.
func TestSameHostUnsafeDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	t.Setenv("GOROCE_RUN_DIR", dir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // past the umask
	_, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.1"), SameHost: true})
	if err == nil {
		t.Fatal("a world-readable rendezvous directory was accepted")
	}
	t.Log(err)
	os.Chmod(dir, 0o700)
	l, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.1"), SameHost: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.1"), SameHost: true, Fault: FaultConfig{Drop: 0.1}}); err == nil {
		t.Error("SameHost with a fault stage was accepted")
	}
}

// TestSameHostStaleSocket: a socket file left by a link that died is
// replaced.
func TestSameHostStaleSocket(t *testing.T) {
	addr := freePort(t, "127.0.0.1")
	dir, err := rendezvousDir(nil)
	if err != nil {
		t.Skip(err)
	}
	path := socketName(dir, addr)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the file stays, nobody listens
	l, err := ListenUDP(UDPConfig{Addr: addr, SameHost: true})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// fuzzRing is FuzzSameHostRing's ring, allocated once: the fuzzer calls
// the target from one goroutine at a time.
var fuzzRing = make([]byte, shmRingSize)

// FuzzSameHostRing feeds the ring reader whatever a producer could write
// into shared memory: slot lengths, source ports, contents and a producer
// index. It must never read outside the ring or return a packet whose
// ICRC is wrong, and it must keep its consumer index within the ring.
func FuzzSameHostRing(f *testing.F) {
	good := batch(3, mustParse("127.0.0.2:4791"))
	for _, p := range good {
		f := sendFields(mustParse("127.0.0.1:4791"), mustParse("127.0.0.2:4791"))
		putICRC(p.Buf, &f)
	}
	var seed []byte
	for _, p := range good {
		seed = binary.LittleEndian.AppendUint32(seed, uint32(len(p.Buf)))
		seed = binary.LittleEndian.AppendUint16(seed, 4791)
		seed = binary.LittleEndian.AppendUint16(seed, uint16(len(p.Buf)))
		seed = append(seed, p.Buf...)
	}
	f.Add(uint64(3), seed, false, false)
	f.Add(uint64(3), seed, true, false)
	f.Add(uint64(shmSlots+1), seed, true, false)
	f.Add(^uint64(0), []byte{0xff, 0xff, 0xff, 0xff}, false, false)
	f.Add(uint64(3), seed, true, true)
	f.Fuzz(func(t *testing.T, tail uint64, data []byte, lend, deferICRC bool) {
		u := &UDP{laddr: mustParse("127.0.0.2:4791")}
		u.deferICRC = deferICRC
		s := &sameHost{u: u}
		u.sh = s
		clear(fuzzRing[:shmHdrSize+8*shmSlotSize]) // all that an iteration writes
		in := &shmIn{peer: netip.MustParseAddr("127.0.0.1"), ring: &shmRing{mem: fuzzRing}, doorbell: -1}
		s.in = []*shmIn{in}
		// data: records of length (4), port (2), bytes to copy (2), bytes.
		for i := uint64(0); len(data) >= 8 && i < 8; i++ {
			slot := in.ring.slot(i)
			copy(slot[:shmSlotHdr], data[:6])
			n := min(int(binary.LittleEndian.Uint16(data[6:])), len(data)-8, MaxPacket)
			copy(slot[shmSlotHdr:], data[8:8+n])
			data = data[8+n:]
		}
		in.ring.u64(shmOffTail).Store(tail)
		pkts := readBufs(MaxBatch)
		for range 3 {
			n := s.read(pkts, lend)
			for _, p := range pkts[:n] {
				b := p.Buf
				if lend {
					b = p.Lent
				}
				if len(b) < minPacket || len(b) > MaxPacket {
					t.Fatalf("returned a packet of %d bytes", len(b))
				}
				// A packet with its ICRC left to the borrower (only lent
				// ones) passes the borrower's check only if it passes the
				// link's own.
				if p.ICRCPending && (!lend || !deferICRC || wire.CheckDeferredICRC(b, p.ICRCSeed) && !checkICRC(p.Peer, u.laddr, b, nil)) {
					t.Fatalf("a pending ICRC (lend %v, defer %v) that the link's check would refuse", lend, deferICRC)
				}
				if !p.ICRCPending && !checkICRC(p.Peer, u.laddr, b, nil) {
					t.Fatalf("returned a packet of %d bytes that fails the ICRC", len(b))
				}
			}
			s.release()
			if len(s.in) == 1 && in.head > tail {
				t.Fatalf("consumer index %d past the producer's %d", in.head, tail)
			}
		}
	})
}

// BenchmarkSameHost streams batches of equal packets through a same-host
// ring, the writer and the reader on goroutines of their own (on a
// machine with two or more CPUs, on two cores: the ring's lines move
// between them as they do between two processes).
func BenchmarkSameHost(b *testing.B) {
	for _, size := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			x, y := udpPairConfig(b, "127.0.0.1", "127.0.0.2", UDPConfig{SameHost: true})
			benchStream(b, x, y, size)
			if s := x.Stats(); s.SameHostSent == 0 {
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
	a.WriteBatch(batch(1, to))
	readN(t, b, 1)
	waitFor(t, "a same-host channel", func() bool {
		a.WriteBatch(batch(1, to))
		readN(t, b, 1)
		return a.Stats().SameHostSent > 0
	})
	bufs := readBufs(MaxBatch)
	// readOne writes one packet to the ring and polls b until a read
	// returns something, which it returns.
	readOne := func(write bool) []Packet {
		t.Helper()
		if write {
			if n, err := a.WriteBatch(batch(1, to)); n != 1 || err != nil {
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
	before := b.sh.socketPolls
	for range reads {
		if got := readOne(true); len(got) != 1 || got[0].Peer != a.LocalAddr() {
			t.Fatalf("read %d packets, the first from %v; want 1 from %v", len(got), got[0].Peer, a.LocalAddr())
		}
	}
	if polls := b.sh.socketPolls - before; polls < reads/shmSocketPolls-1 || polls > reads/shmSocketPolls+1 {
		t.Errorf("%d reads with a ring packet each looked at the socket %d times, want %d", reads, polls, reads/shmSocketPolls)
	}

	// A datagram from a link without the same-host path waits on the
	// socket while the ring has a packet for every read.
	c, _ := udpPair(t, "127.0.0.3", "127.0.0.3")
	if n, err := c.WriteBatch(batch(1, to)); n != 1 || err != nil {
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
