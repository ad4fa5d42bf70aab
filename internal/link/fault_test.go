package link

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/wire"
)

const sentinelPSN = 0xffffff

// faultPair returns a memory pair whose first link sends with the faults of
// spec; the second sends without faults.
func faultPair(t testing.TB, family, spec string) (a, b *memLink) {
	t.Helper()
	cfg, err := ParseFault(spec)
	if err != nil {
		t.Fatal(err)
	}
	addrA, addrB := mustParse("10.0.0.1:4791"), mustParse("10.0.0.2:4791")
	if family == "IPv6" {
		addrA, addrB = mustParse("[fd00::1]:4791"), mustParse("[fd00::2]:4791")
	}
	la, lb := NewMemPairFault(addrA, addrB, cfg, FaultConfig{})
	t.Cleanup(func() { la.Close(); lb.Close() })
	return la.(*memLink), lb.(*memLink)
}

// psnPackets returns n packets to peer with PSNs first, first+1, ...: SEND
// ONLY with payloads of a few sizes, each in its own buffer.
func psnPackets(n int, first uint32, peer netip.AddrPort) []Packet {
	pkts := make([]Packet, n)
	for i := range pkts {
		psn := first + uint32(i)
		pkts[i] = Packet{Buf: buildPacket(make([]byte, MaxPacket), 0x11, psn, []int{0, 8, 60, 256}[i%4], byte(psn)), Peer: peer}
	}
	return pkts
}

// ackPacket returns an ACKNOWLEDGE (or a NAK) for psn to peer.
func ackPacket(psn uint32, nak bool, peer netip.AddrPort) Packet {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.OpAcknowledge, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: psn},
		AETH: wire.AETHFields{Syndrome: wire.Syndrome(wire.AckTypeACK, wire.CreditsInvalid), MSN: 1},
	}
	if nak {
		h.AETH.Syndrome = wire.Syndrome(wire.AckTypeNAK, uint8(wire.NAKPSNSeqError))
	}
	b := make([]byte, MaxPacket)
	return Packet{Buf: b[:wire.Build(b, &h, nil)], Peer: peer}
}

func psnOf(p Packet) uint32 { return wire.BTH(p.Buf).PSN() }

func psns(pkts []Packet) []uint32 {
	s := make([]uint32, len(pkts))
	for i, p := range pkts {
		s[i] = psnOf(p)
	}
	return s
}

// write sends pkts on l, failing the test unless all are taken.
func write(t testing.TB, l Link, pkts []Packet) {
	t.Helper()
	if n, err := l.WriteBatch(pkts); n != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
	}
}

// readUntil reads from l until done says the packets so far are enough,
// failing the test after 10 s. It returns copies, CE included.
func readUntil(t testing.TB, l Link, done func([]Packet) bool) []Packet {
	t.Helper()
	type result struct {
		pkts []Packet
		err  error
	}
	res := make(chan result, 1)
	go func() {
		var got []Packet
		bufs := readBufs(MaxBatch)
		for !done(got) {
			k, err := l.ReadBatch(bufs)
			if err != nil {
				res <- result{got, err}
				return
			}
			for _, p := range bufs[:k] {
				got = append(got, Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer, CE: p.CE})
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

// readAll returns everything a has sent to b so far, nothing being held:
// it puts a sentinel packet behind them, past a's fault stage, and reads up
// to it, so that bad packets at the end are read and counted too.
func readAll(t testing.TB, a, b *memLink) []Packet {
	t.Helper()
	s := buildPacket(make([]byte, MaxPacket), 0x11, sentinelPSN, 0, 0)
	f := sendFields(a.addr, b.addr)
	putICRC(s, &f)
	a.writeMu.Lock()
	ok := a.put(s, a.addr, false)
	a.writeMu.Unlock()
	if !ok {
		t.Fatal("sentinel: link closed")
	}
	got := readUntil(t, b, func(got []Packet) bool { return len(got) > 0 && psnOf(got[len(got)-1]) == sentinelPSN })
	return got[:len(got)-1]
}

// sendAndRead writes n packets with PSNs 0..n-1 from a to b in batches and
// returns what b received and what was sent (with ICRCs filled).
func sendAndRead(t testing.TB, a, b *memLink, n int) (got, sent []Packet) {
	t.Helper()
	sent = psnPackets(n, 0, b.addr)
	for i := 0; i < n; i += 100 {
		write(t, a, sent[i:min(i+100, n)])
		got = append(got, readAll(t, a, b)...)
	}
	return got, sent
}

func TestFaultNone(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "")
	if a.fault != nil {
		t.Fatal("the zero FaultConfig made a fault stage")
	}
	got, sent := sendAndRead(t, a, b, 10)
	checkReceived(t, got, sent, a.addr, b.addr)
	if s := a.Stats().Fault; s != (FaultStats{}) {
		t.Errorf("fault stats %+v, want zero", s)
	}
}

func TestFaultDropAll(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "drop=100%")
	got, _ := sendAndRead(t, a, b, 500)
	if len(got) != 0 {
		t.Errorf("%d packets delivered, want none", len(got))
	}
	if s := a.Stats(); s.Fault.Seen != 500 || s.Fault.Dropped != 500 || s.SentPackets != 500 {
		t.Errorf("stats %+v; want 500 seen, sent and dropped", s)
	}
}

// TestFaultDropRate drops 10 % of 10000 packets: the count must be within
// five standard deviations of 1000, and the same seed must drop the same
// packets, another seed others.
func TestFaultDropRate(t *testing.T) {
	run := func(seed string) ([]uint32, FaultStats) {
		a, b := faultPair(t, "IPv4", "drop=10%,seed="+seed)
		got, _ := sendAndRead(t, a, b, 10000)
		return psns(got), a.Stats().Fault
	}
	first, s := run("42")
	if s.Seen != 10000 || s.Dropped < 850 || s.Dropped > 1150 || len(first) != 10000-int(s.Dropped) {
		t.Errorf("%d delivered, stats %+v; want 10000 seen, 1000±150 dropped, the rest delivered", len(first), s)
	}
	if !slices.IsSorted(first) {
		t.Error("drops reordered the packets")
	}
	if again, _ := run("42"); !slices.Equal(first, again) {
		t.Error("the same seed delivered different packets")
	}
	if other, _ := run("43"); slices.Equal(first, other) {
		t.Error("seeds 42 and 43 delivered the same packets")
	}
}

// TestFaultCorrupt flips bits below the ICRC: every corrupted packet must be
// refused by the receiver's ICRC check, none delivered, and every delivered
// packet must be exactly what was sent.
func TestFaultCorrupt(t *testing.T) {
	for _, family := range []string{"IPv4", "IPv6"} {
		t.Run(family, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := faultPair(t, family, "corrupt=20%,seed=5")
			got, sent := sendAndRead(t, a, b, 2000)
			for i, p := range sent { // the caller's buffers: only the ICRC written
				if !checkICRC(a.addr, b.addr, p.Buf, nil) {
					t.Fatalf("sent packet %d: the stage corrupted the caller's buffer", i)
				}
			}
			fs, rs := a.Stats().Fault, b.Stats()
			if fs.Corrupted < 300 || fs.Corrupted > 500 {
				t.Errorf("Corrupted = %d, want about 400", fs.Corrupted)
			}
			if rs.ICRCErrors != fs.Corrupted || len(got) != 2000-int(fs.Corrupted) || rs.RcvdPackets != uint64(len(got))+20 { // + sentinels
				t.Errorf("receiver: %d ICRC errors, %d received; sender corrupted %d of 2000", rs.ICRCErrors, rs.RcvdPackets, fs.Corrupted)
			}
			for _, p := range got {
				if psn := psnOf(p); psn >= 2000 || !bytes.Equal(p.Buf, sent[psn].Buf) {
					t.Fatalf("delivered packet PSN %#x differs from the one sent", psn)
				}
			}
		})
	}
}

func TestFaultDuplicate(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "dup=30%,seed=1")
	got, sent := sendAndRead(t, a, b, 1000)
	s := a.Stats().Fault
	if s.Duplicated < 230 || s.Duplicated > 370 || len(got) != 1000+int(s.Duplicated) {
		t.Fatalf("%d delivered, Duplicated = %d; want 1000 + about 300", len(got), s.Duplicated)
	}
	twice := 0
	for i := 0; i < len(got); i++ {
		if i > 0 && psnOf(got[i]) == psnOf(got[i-1]) {
			twice++
		} else if want := uint32(i - twice); psnOf(got[i]) != want {
			t.Fatalf("packet %d: PSN %d, want %d", i, psnOf(got[i]), want)
		}
		if !bytes.Equal(got[i].Buf, sent[psnOf(got[i])].Buf) {
			t.Fatalf("packet %d differs from the one sent", i)
		}
	}
	if twice != int(s.Duplicated) {
		t.Errorf("%d packets came twice, Duplicated = %d", twice, s.Duplicated)
	}
}

func TestFaultReorder(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "reorder=25%,window=8,seed=9")
	const n = 1000
	sent := psnPackets(n, 0, b.addr)
	errc := make(chan error, 1)
	go func() { // more than the queue holds: write while reading
		var err error
		for i := 0; i < n && err == nil; i += 100 {
			_, err = a.WriteBatch(sent[i : i+100])
		}
		errc <- err
	}()
	got := readUntil(t, b, func(got []Packet) bool { return len(got) >= n })
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	order := psns(got)
	if slices.IsSorted(order) {
		t.Error("nothing was reordered")
	}
	sorted := slices.Sorted(slices.Values(order))
	for i, psn := range sorted {
		if psn != uint32(i) {
			t.Fatalf("received PSNs are not a permutation of 0..%d: at %d: %d", n-1, i, psn)
		}
	}
	for _, p := range got {
		if !bytes.Equal(p.Buf, sent[psnOf(p)].Buf) {
			t.Fatalf("PSN %d differs from the one sent", psnOf(p))
		}
	}
	if s := a.Stats().Fault; s.Reordered < 180 || s.Reordered > 320 || s.Discarded != 0 {
		t.Errorf("stats %+v; want about 250 reordered, none discarded", s)
	}
}

// TestFaultDelay checks in real time that no packet arrives before its
// delay.
func TestFaultDelay(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "delay=30ms,jitter=10ms")
	start := time.Now()
	write(t, a, psnPackets(20, 0, b.addr))
	first := readUntil(t, b, func(got []Packet) bool { return len(got) > 0 })
	if d := time.Since(start); d < 30*time.Millisecond || d > 5*time.Second {
		t.Errorf("first packet after %v, want 30 ms or a little more", d)
	}
	rest := readUntil(t, b, func(got []Packet) bool { return len(first)+len(got) >= 20 })
	if s := a.Stats().Fault; s.Delayed != 20 || len(first)+len(rest) != 20 {
		t.Errorf("%d delivered, stats %+v; want 20 delivered and delayed", len(first)+len(rest), s)
	}
}

// TestFaultDelayRule delays one PSN: it arrives after the others.
func TestFaultDelayRule(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "rule=delay=20ms:psn=3")
	write(t, a, psnPackets(10, 0, b.addr))
	got := readUntil(t, b, func(got []Packet) bool { return len(got) >= 10 })
	if want := []uint32{0, 1, 2, 4, 5, 6, 7, 8, 9, 3}; !slices.Equal(psns(got), want) {
		t.Errorf("order %v, want %v", psns(got), want)
	}
	if s := a.Stats().Fault; s.RuleHits != 1 || s.Delayed != 1 {
		t.Errorf("stats %+v; want one rule hit, one delayed", s)
	}
}

func TestFaultCEMark(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv6", "ce=100%")
	got, _ := sendAndRead(t, a, b, 50)
	for i, p := range got {
		if !p.CE {
			t.Fatalf("packet %d arrived without CE", i)
		}
	}
	if s := a.Stats().Fault; s.CEMarked != 50 || len(got) != 50 {
		t.Errorf("%d delivered, stats %+v; want 50 delivered and CE-marked", len(got), s)
	}
	// The other direction has no faults.
	write(t, b, psnPackets(5, 0, a.addr))
	for i, p := range readN(t, a, 5) {
		if p.CE {
			t.Errorf("reverse packet %d arrived with CE", i)
		}
	}
	// Half, by chance: what arrives marked is what the stage counted.
	a, b = faultPair(t, "IPv4", "ce=50%,seed=3")
	got, _ = sendAndRead(t, a, b, 400)
	marked := 0
	for _, p := range got {
		if p.CE {
			marked++
		}
	}
	if s := a.Stats().Fault; uint64(marked) != s.CEMarked || marked < 150 || marked > 250 {
		t.Errorf("%d arrived marked, CEMarked = %d; want equal, about 200", marked, s.CEMarked)
	}
}

// TestFaultSameSeed runs a mix of faults twice: the same seed must deliver
// the same bytes, CE marks and counts.
func TestFaultSameSeed(t *testing.T) {
	const spec = "drop=5%,dup=5%,corrupt=5%,ce=5%,seed=77"
	run := func() ([]Packet, Stats, Stats) {
		a, b := faultPair(t, "IPv4", spec)
		got, _ := sendAndRead(t, a, b, 2000)
		return got, a.Stats(), b.Stats()
	}
	got1, sa1, sb1 := run()
	got2, sa2, sb2 := run()
	if sa1 != sa2 || sb1 != sb2 {
		t.Errorf("stats differ:\n%+v %+v\n%+v %+v", sa1, sb1, sa2, sb2)
	}
	if !slices.EqualFunc(got1, got2, func(p, q Packet) bool { return bytes.Equal(p.Buf, q.Buf) && p.CE == q.CE }) {
		t.Error("the same seed delivered different packets")
	}
	f := sa1.Fault
	if f.Dropped == 0 || f.Duplicated == 0 || f.Corrupted == 0 || f.CEMarked == 0 || sb1.ICRCErrors != f.Corrupted ||
		uint64(len(got1)) != f.Seen-f.Dropped+f.Duplicated-f.Corrupted {
		t.Errorf("%d delivered, sender %+v, receiver %+v", len(got1), f, sb1)
	}
}

// TestFaultLimit holds more packets than the limit: the rest overflow.
func TestFaultLimit(t *testing.T) {
	checkNoLeaks(t)
	a, b := faultPair(t, "IPv4", "delay=1h,limit=5")
	write(t, a, psnPackets(10, 0, b.addr))
	if s := a.Stats().Fault; s.Delayed != 5 || s.Overflow != 5 {
		t.Errorf("stats %+v; want 5 delayed, 5 overflowed", s)
	}
	a.Close()
	if s := a.Stats().Fault; s.Discarded != 5 {
		t.Errorf("after Close: stats %+v; want the 5 held discarded", s)
	}
}

// TestFaultCloseHeld closes links that hold packets, also while the
// release goroutine or the writer is blocked on a full queue: nothing may
// leak or stay blocked, and what is held is counted as discarded.
func TestFaultCloseHeld(t *testing.T) {
	for _, tc := range []struct {
		spec string
		n    int
	}{
		{"delay=1h", 10},
		{"reorder=100%,window=64,delay=1h,dup=50%", 10},
		{"delay=1ms", memQueueLen + 50}, // the queue fills up: released packets block
		{"reorder=100%", memQueueLen + 50},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := faultPair(t, "IPv4", tc.spec)
			errc := make(chan error, 1)
			go func() {
				_, err := a.WriteBatch(psnPackets(tc.n, 0, b.addr))
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if err != nil {
					wantClosed(t, "blocked WriteBatch", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not unblock WriteBatch")
			}
			_, err := a.WriteBatch(psnPackets(1, 0, b.addr))
			wantClosed(t, "WriteBatch after Close", err)
			s := a.Stats().Fault
			if tc.spec == "delay=1h" && s.Discarded != 10 {
				t.Errorf("stats %+v; want 10 discarded", s)
			}
			if s.Discarded == 0 {
				t.Errorf("stats %+v; want some discarded", s)
			}
		})
	}
}

// TestFaultAllocs checks the steady state of a stage that holds nothing:
// drops, duplicates, corruption and CE marks allocate nothing.
func TestFaultAllocs(t *testing.T) {
	a, b := faultPair(t, "IPv4", "drop=10%,dup=10%,corrupt=10%,ce=10%,seed=1")
	pkts := batch(64, b.addr)
	bufs := readBufs(64)
	sentinel := buildPacket(make([]byte, MaxPacket), 0x11, sentinelPSN, 0, 0)
	f := sendFields(a.addr, b.addr)
	putICRC(sentinel, &f)
	round := func() {
		if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		a.put(sentinel, a.addr, false)
		for done := false; !done; {
			n, err := b.ReadBatch(bufs)
			if err != nil {
				t.Fatal(err)
			}
			done = psnOf(bufs[n-1]) == sentinelPSN
		}
	}
	round()
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%v allocations per batch of 64, want 0", allocs)
	}
}

func TestNewMemPairFaultPanicsOnBadConfig(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Error("NewMemPairFault with Drop 2 did not panic")
		}
	}()
	NewMemPairFault(mustParse("10.0.0.1:1"), mustParse("10.0.0.2:1"), FaultConfig{Drop: 2}, FaultConfig{})
}
