package fault

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

const sentinelPSN = 0xffffff

// faultPair returns a memory pair whose first link sends with the faults of
// spec, through a stage in front of it; the second sends without faults.
func faultPair(t testing.TB, family, spec string) (a *Link, b *memlink.Link) {
	t.Helper()
	cfg, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	addrA, addrB := linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791")
	if family == "IPv6" {
		addrA, addrB = linktest.MustParse("[fd00::1]:4791"), linktest.MustParse("[fd00::2]:4791")
	}
	ma, mb := memlink.NewPair(addrA, addrB)
	a, err = Wrap(ma, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); mb.Close() })
	return a, mb
}

// psnPackets returns n packets to peer with PSNs first, first+1, ...: SEND
// ONLY with payloads of a few sizes, each in its own buffer.
func psnPackets(n int, first uint32, peer netip.AddrPort) []link.Packet {
	pkts := make([]link.Packet, n)
	for i := range pkts {
		psn := first + uint32(i)
		pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, psn, []int{0, 8, 60, 256}[i%4], byte(psn)), Peer: peer}
	}
	return pkts
}

// ackPacket returns an ACKNOWLEDGE (or a NAK) for psn to peer.
func ackPacket(psn uint32, nak bool, peer netip.AddrPort) link.Packet {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.OpAcknowledge, PKey: wire.DefaultPKey, DestQP: 0x12, PSN: psn},
		AETH: wire.AETHFields{Syndrome: wire.Syndrome(wire.AckTypeACK, wire.CreditsInvalid), MSN: 1},
	}
	if nak {
		h.AETH.Syndrome = wire.Syndrome(wire.AckTypeNAK, uint8(wire.NAKPSNSeqError))
	}
	b := make([]byte, link.MaxPacket)
	return link.Packet{Buf: b[:wire.Build(b, &h, nil)], Peer: peer}
}

func psnOf(p link.Packet) uint32 { return wire.BTH(p.Buf).PSN() }

func psns(pkts []link.Packet) []uint32 {
	s := make([]uint32, len(pkts))
	for i, p := range pkts {
		s[i] = psnOf(p)
	}
	return s
}

// write sends pkts on l, failing the test unless all are taken.
func write(t testing.TB, l link.Link, pkts []link.Packet) {
	t.Helper()
	if n, err := l.WriteBatch(pkts); n != len(pkts) || err != nil {
		t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, len(pkts))
	}
}

// readAll returns everything a has sent to b so far, nothing being held:
// it puts a sentinel packet behind them, past a's fault stage, and reads up
// to it, so that bad packets at the end are read and counted too.
func readAll(t testing.TB, a *Link, b link.Link) []link.Packet {
	t.Helper()
	s := linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, sentinelPSN, 0, 0)
	f := link.SendFields(a.LocalAddr(), b.LocalAddr())
	link.PutICRC(s, &f)
	a.mu.Lock() // in order with what the stage releases
	_, err := a.inner.WriteSealed([]link.Sealed{{Buf: s, Dst: b.LocalAddr(), Src: a.LocalAddr()}})
	a.mu.Unlock()
	if err != nil {
		t.Fatal("sentinel: link closed")
	}
	got := linktest.ReadUntil(t, b, func(got []link.Packet) bool { return len(got) > 0 && psnOf(got[len(got)-1]) == sentinelPSN })
	return got[:len(got)-1]
}

// sendAndRead writes n packets with PSNs 0..n-1 from a to b in batches and
// returns what b received and what was sent (with ICRCs filled).
func sendAndRead(t testing.TB, a *Link, b link.Link, n int) (got, sent []link.Packet) {
	t.Helper()
	sent = psnPackets(n, 0, b.LocalAddr())
	for i := 0; i < n; i += 100 {
		write(t, a, sent[i:min(i+100, n)])
		got = append(got, readAll(t, a, b)...)
	}
	return got, sent
}

// faultCounts are the fault stage's counters of a link, by name.
type faultCounts struct {
	Seen, Dropped, Duplicated, Reordered, Corrupted, Delayed, CEMarked, RuleHits, Overflow, Discarded uint64
}

// faultsOf returns what l's fault stage counted.
func faultsOf(l link.Link) faultCounts {
	s := l.Stats()
	return faultCounts{
		Seen: s[stats.FaultSeen], Dropped: s[stats.FaultDropChance], Duplicated: s[stats.FaultDuplicated],
		Reordered: s[stats.FaultReordered], Corrupted: s[stats.FaultCorrupted], Delayed: s[stats.FaultDelayed],
		CEMarked: s[stats.FaultCEMarked], RuleHits: s[stats.FaultRuleHits], Overflow: s[stats.FaultOverflow],
		Discarded: s[stats.FaultDiscarded],
	}
}

func TestFaultNone(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "")
	if a.st.done != nil {
		t.Fatal("the zero Config started a release goroutine")
	}
	got, sent := sendAndRead(t, a, b, 10)
	linktest.CheckReceived(t, got, sent, a.LocalAddr(), b.LocalAddr())
	if s := faultsOf(a); s != (faultCounts{Seen: 10}) {
		t.Errorf("fault stats %+v, want zero", s)
	}
}

func TestFaultDropAll(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "drop=100%")
	got, _ := sendAndRead(t, a, b, 500)
	if len(got) != 0 {
		t.Errorf("%d packets delivered, want none", len(got))
	}
	if s := a.Stats(); s[stats.FaultSeen] != 500 || s[stats.FaultDropChance] != 500 || s[stats.LinkSentPkts] != 500 {
		t.Errorf("stats %+v; want 500 seen, sent and dropped", s)
	}
}

// TestFaultDropRate drops 10 % of 10000 packets: the count must be within
// five standard deviations of 1000, and the same seed must drop the same
// packets, another seed others.
func TestFaultDropRate(t *testing.T) {
	run := func(seed string) ([]uint32, link.Stats) {
		a, b := faultPair(t, "IPv4", "drop=10%,seed="+seed)
		got, _ := sendAndRead(t, a, b, 10000)
		return psns(got), a.Stats()
	}
	first, s := run("42")
	if s[stats.FaultSeen] != 10000 || s[stats.FaultDropChance] < 850 || s[stats.FaultDropChance] > 1150 || len(first) != 10000-int(s[stats.FaultDropChance]) {
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
			linktest.CheckNoLeaks(t)
			a, b := faultPair(t, family, "corrupt=20%,seed=5")
			got, sent := sendAndRead(t, a, b, 2000)
			for i, p := range sent { // the caller's buffers: only the ICRC written
				if !link.CheckICRC(a.LocalAddr(), b.LocalAddr(), p.Buf, nil) {
					t.Fatalf("sent packet %d: the stage corrupted the caller's buffer", i)
				}
			}
			fs, rs := a.Stats(), b.Stats()
			if fs[stats.FaultCorrupted] < 300 || fs[stats.FaultCorrupted] > 500 {
				t.Errorf("Corrupted = %d, want about 400", fs[stats.FaultCorrupted])
			}
			if rs[stats.ICRCErrors] != fs[stats.FaultCorrupted] || len(got) != 2000-int(fs[stats.FaultCorrupted]) || rs[stats.LinkRcvdPkts] != uint64(len(got))+20 { // + sentinels
				t.Errorf("receiver: %d ICRC errors, %d received; sender corrupted %d of 2000", rs[stats.ICRCErrors], rs[stats.LinkRcvdPkts], fs[stats.FaultCorrupted])
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
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "dup=30%,seed=1")
	got, sent := sendAndRead(t, a, b, 1000)
	s := a.Stats()
	if s[stats.FaultDuplicated] < 230 || s[stats.FaultDuplicated] > 370 || len(got) != 1000+int(s[stats.FaultDuplicated]) {
		t.Fatalf("%d delivered, Duplicated = %d; want 1000 + about 300", len(got), s[stats.FaultDuplicated])
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
	if twice != int(s[stats.FaultDuplicated]) {
		t.Errorf("%d packets came twice, Duplicated = %d", twice, s[stats.FaultDuplicated])
	}
}

func TestFaultReorder(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "reorder=25%,window=8,seed=9")
	const n = 1000
	sent := psnPackets(n, 0, b.LocalAddr())
	errc := make(chan error, 1)
	go func() { // more than the queue holds: write while reading
		var err error
		for i := 0; i < n && err == nil; i += 100 {
			_, err = a.WriteBatch(sent[i : i+100])
		}
		errc <- err
	}()
	got := linktest.ReadUntil(t, b, func(got []link.Packet) bool { return len(got) >= n })
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
	if s := a.Stats(); s[stats.FaultReordered] < 180 || s[stats.FaultReordered] > 320 || s[stats.FaultDiscarded] != 0 {
		t.Errorf("stats %+v; want about 250 reordered, none discarded", s)
	}
}

// TestFaultDelay checks in real time that no packet arrives before its
// delay.
func TestFaultDelay(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "delay=30ms,jitter=10ms")
	start := time.Now()
	write(t, a, psnPackets(20, 0, b.LocalAddr()))
	first := linktest.ReadUntil(t, b, func(got []link.Packet) bool { return len(got) > 0 })
	if d := time.Since(start); d < 30*time.Millisecond || d > 5*time.Second {
		t.Errorf("first packet after %v, want 30 ms or a little more", d)
	}
	rest := linktest.ReadUntil(t, b, func(got []link.Packet) bool { return len(first)+len(got) >= 20 })
	if s := a.Stats(); s[stats.FaultDelayed] != 20 || len(first)+len(rest) != 20 {
		t.Errorf("%d delivered, stats %+v; want 20 delivered and delayed", len(first)+len(rest), s)
	}
}

// TestFaultDelayRule delays one PSN: it arrives after the others.
func TestFaultDelayRule(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "rule=delay=20ms:psn=3")
	write(t, a, psnPackets(10, 0, b.LocalAddr()))
	got := linktest.ReadUntil(t, b, func(got []link.Packet) bool { return len(got) >= 10 })
	if want := []uint32{0, 1, 2, 4, 5, 6, 7, 8, 9, 3}; !slices.Equal(psns(got), want) {
		t.Errorf("order %v, want %v", psns(got), want)
	}
	if s := a.Stats(); s[stats.FaultRuleHits] != 1 || s[stats.FaultDelayed] != 1 {
		t.Errorf("stats %+v; want one rule hit, one delayed", s)
	}
}

func TestFaultCEMark(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv6", "ce=100%")
	got, _ := sendAndRead(t, a, b, 50)
	for i, p := range got {
		if !p.CE {
			t.Fatalf("packet %d arrived without CE", i)
		}
	}
	if s := a.Stats(); s[stats.FaultCEMarked] != 50 || len(got) != 50 {
		t.Errorf("%d delivered, stats %+v; want 50 delivered and CE-marked", len(got), s)
	}
	// The other direction has no faults.
	write(t, b, psnPackets(5, 0, a.LocalAddr()))
	for i, p := range linktest.ReadN(t, a, 5) {
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
	if s := a.Stats(); uint64(marked) != s[stats.FaultCEMarked] || marked < 150 || marked > 250 {
		t.Errorf("%d arrived marked, CEMarked = %d; want equal, about 200", marked, s[stats.FaultCEMarked])
	}
}

// TestFaultSameSeed runs a mix of faults twice: the same seed must deliver
// the same bytes, CE marks and counts.
func TestFaultSameSeed(t *testing.T) {
	const spec = "drop=5%,dup=5%,corrupt=5%,ce=5%,seed=77"
	run := func() ([]link.Packet, link.Stats, link.Stats) {
		a, b := faultPair(t, "IPv4", spec)
		got, _ := sendAndRead(t, a, b, 2000)
		return got, a.Stats(), b.Stats()
	}
	got1, sa1, sb1 := run()
	got2, sa2, sb2 := run()
	if sa1 != sa2 || sb1 != sb2 {
		t.Errorf("stats differ:\n%+v %+v\n%+v %+v", sa1, sb1, sa2, sb2)
	}
	if !slices.EqualFunc(got1, got2, func(p, q link.Packet) bool { return bytes.Equal(p.Buf, q.Buf) && p.CE == q.CE }) {
		t.Error("the same seed delivered different packets")
	}
	f := sa1
	if f[stats.FaultDropChance] == 0 || f[stats.FaultDuplicated] == 0 || f[stats.FaultCorrupted] == 0 || f[stats.FaultCEMarked] == 0 || sb1[stats.ICRCErrors] != f[stats.FaultCorrupted] ||
		uint64(len(got1)) != f[stats.FaultSeen]-f[stats.FaultDropChance]+f[stats.FaultDuplicated]-f[stats.FaultCorrupted] {
		t.Errorf("%d delivered, sender %+v, receiver %+v", len(got1), f, sb1)
	}
}

// TestFaultLimit holds more packets than the limit: the rest overflow.
func TestFaultLimit(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := faultPair(t, "IPv4", "delay=1h,limit=5")
	write(t, a, psnPackets(10, 0, b.LocalAddr()))
	if s := a.Stats(); s[stats.FaultDelayed] != 5 || s[stats.FaultOverflow] != 5 {
		t.Errorf("stats %+v; want 5 delayed, 5 overflowed", s)
	}
	a.Close()
	if s := a.Stats(); s[stats.FaultDiscarded] != 5 {
		t.Errorf("after Close: stats %+v; want the 5 held discarded", s)
	}
}

// memQueue is how many packets a memory pair holds in each direction
// (link/memlink).
const memQueue = 256

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
		{"delay=1ms", memQueue + 50}, // the queue fills up: released packets block
		{"reorder=100%", memQueue + 50},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := faultPair(t, "IPv4", tc.spec)
			errc := make(chan error, 1)
			go func() {
				_, err := a.WriteBatch(psnPackets(tc.n, 0, b.LocalAddr()))
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if err != nil {
					linktest.WantClosed(t, "blocked WriteBatch", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not unblock WriteBatch")
			}
			_, err := a.WriteBatch(psnPackets(1, 0, b.LocalAddr()))
			linktest.WantClosed(t, "WriteBatch after Close", err)
			s := a.Stats()
			if tc.spec == "delay=1h" && s[stats.FaultDiscarded] != 10 {
				t.Errorf("stats %+v; want 10 discarded", s)
			}
			if s[stats.FaultDiscarded] == 0 {
				t.Errorf("stats %+v; want some discarded", s)
			}
		})
	}
}

// TestFaultAllocs checks the steady state of a stage that holds nothing:
// drops, duplicates, corruption and CE marks allocate nothing.
func TestFaultAllocs(t *testing.T) {
	a, b := faultPair(t, "IPv4", "drop=10%,dup=10%,corrupt=10%,ce=10%,seed=1")
	pkts := linktest.Batch(64, b.LocalAddr())
	bufs := linktest.ReadBufs(64)
	sentinel := linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, sentinelPSN, 0, 0)
	f := link.SendFields(a.LocalAddr(), b.LocalAddr())
	link.PutICRC(sentinel, &f)
	behind := []link.Sealed{{Buf: sentinel, Dst: b.LocalAddr(), Src: a.LocalAddr()}}
	round := func() {
		if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		a.inner.WriteSealed(behind)
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

// TestWrapBadConfig: Wrap refuses an invalid configuration with ErrBad.
func TestWrapBadConfig(t *testing.T) {
	a, b := memlink.NewPair(linktest.MustParse("10.0.0.1:1"), linktest.MustParse("10.0.0.2:1"))
	defer a.Close()
	defer b.Close()
	if _, err := Wrap(a, Config{Drop: 2}); !errors.Is(err, ErrBad) {
		t.Errorf("Wrap with Drop 2: %v, want ErrBad", err)
	}
}
