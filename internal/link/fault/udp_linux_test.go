package fault

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
)

// udpFaultPair opens two UDP links on free ports of the two IPs; the first
// sends with the faults of spec.
func udpFaultPair(t testing.TB, ipA, ipB, spec string) (a *Link, b *udp.Link) {
	t.Helper()
	cfg, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	ua, err := udp.Listen(udp.Config{Addr: linktest.FreePort(t, ipA), PlainSend: true})
	if err != nil {
		t.Fatal(err)
	}
	if a, err = Wrap(ua, cfg); err != nil {
		ua.Close()
		t.Fatal(err)
	}
	b, err = udp.Listen(udp.Config{Addr: linktest.FreePort(t, ipB), ReportCE: true}) // for TestUDPFaultCE
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// collector reads from a link in the background until it is closed.
type collector struct {
	mu   sync.Mutex
	pkts []link.Packet // copies
	done chan struct{}
}

func collect(t testing.TB, l link.Link) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		bufs := linktest.ReadBufs(link.MaxBatch)
		for {
			n, err := l.ReadBatch(bufs)
			if err != nil {
				return
			}
			c.mu.Lock()
			for _, p := range bufs[:n] {
				c.pkts = append(c.pkts, link.Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer, CE: p.CE})
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.Close(); <-c.done })
	return c
}

func (c *collector) got() []link.Packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pkts)
}

// all returns what the collector has once it holds every packet l counts
// as received: l counts a batch when ReadBatch returns it, before the
// collector has appended it.
func (c *collector) all(t testing.TB, l link.Link) []link.Packet {
	t.Helper()
	linktest.WaitFor(t, "the collector to catch up", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return uint64(len(c.pkts)) >= l.Stats()[stats.LinkRcvdPkts]
	})
	return c.got()
}

var udpFamilies = []struct{ name, a, b string }{
	{"IPv4", "127.0.0.1", "127.0.0.2"},
	{"IPv6", "::1", "::1"},
}

// TestUDPFault drops, duplicates and corrupts over UDP, from two source
// ports: corrupted packets must be refused by the receiving link's ICRC
// check, and what arrives must be exactly what a memory pair with the same
// seed delivers.
func TestUDPFault(t *testing.T) {
	const spec = "drop=20%,dup=20%,corrupt=20%,seed=11"
	const n = 600
	for _, fam := range udpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpFaultPair(t, fam.a, fam.b, spec)
			c := collect(t, b)
			sent := psnPackets(n, 0, b.LocalAddr())
			for i := range sent {
				if i%3 == 0 {
					sent[i].SrcPort = link.SourcePort(0x11)
				}
			}
			for i := 0; i < n; i += 60 {
				write(t, a, sent[i:i+60])
			}
			fs := faultsOf(a)
			want := fs.Seen - fs.Dropped + fs.Duplicated - fs.Corrupted
			linktest.WaitFor(t, "all packets", func() bool {
				s := b.Stats()
				return s[stats.LinkRcvdPkts] >= want && s[stats.ICRCErrors] >= fs.Corrupted
			})
			time.Sleep(20 * time.Millisecond) // anything more would arrive now
			if s := b.Stats(); s[stats.LinkRcvdPkts] != want || s[stats.ICRCErrors] != fs.Corrupted {
				t.Errorf("receiver %+v; want %d received, %d ICRC errors (sender %+v)", s, want, fs.Corrupted, fs)
			}
			got := c.all(t, b)
			for _, p := range got {
				psn := psnOf(p)
				if psn >= n || !bytes.Equal(p.Buf[:len(p.Buf)-4], sent[psn].Buf[:len(p.Buf)-4]) {
					t.Fatalf("delivered packet PSN %#x differs from the one sent", psn)
				}
			}

			ma, mb := faultPair(t, fam.name, spec)
			mgot, _ := sendAndRead(t, ma, mb, n)
			if !slices.Equal(psns(got), psns(mgot)) {
				t.Errorf("UDP delivered PSNs\n%v\nmemory pair with the same seed\n%v", psns(got), psns(mgot))
			}
			if ms := faultsOf(ma); ms != fs {
				t.Errorf("fault stats: UDP %+v, memory pair %+v", fs, ms)
			}
		})
	}
}

// TestUDPFaultCE marks packets CE on the way out; the receiving link must
// report exactly those.
func TestUDPFaultCE(t *testing.T) {
	for _, fam := range udpFamilies {
		t.Run(fam.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpFaultPair(t, fam.a, fam.b, "ce=50%,seed=3")
			c := collect(t, b)
			write(t, a, psnPackets(200, 0, b.LocalAddr()))
			linktest.WaitFor(t, "200 packets", func() bool { return b.Stats()[stats.LinkRcvdPkts] >= 200 })
			marked := 0
			for _, p := range c.all(t, b) {
				if p.CE {
					marked++
				}
			}
			if s := a.Stats(); uint64(marked) != s[stats.FaultCEMarked] || marked < 70 || marked > 130 {
				t.Errorf("%d arrived marked CE, the stage marked %d; want equal, about 100", marked, s[stats.FaultCEMarked])
			}
		})
	}
}

// TestUDPFaultHolds delays and reorders over UDP: the release goroutine
// sends what the stage holds, nothing is lost.
func TestUDPFaultHolds(t *testing.T) {
	for _, tc := range []struct{ spec string }{{"delay=20ms"}, {"reorder=50%,seed=2"}, {"delay=5ms,jitter=5ms,seed=4"}} {
		t.Run(tc.spec, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.3", tc.spec)
			c := collect(t, b)
			start := time.Now()
			var first time.Duration
			write(t, a, psnPackets(200, 0, b.LocalAddr()))
			linktest.WaitFor(t, "200 packets", func() bool {
				if first == 0 && b.Stats()[stats.LinkRcvdPkts] > 0 {
					first = time.Since(start)
				}
				return b.Stats()[stats.LinkRcvdPkts] >= 200
			})
			if tc.spec == "delay=20ms" && first < 20*time.Millisecond {
				t.Errorf("first packet after %v, want at least 20 ms", first)
			}
			order := psns(c.all(t, b))
			if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, psns(psnPackets(200, 0, b.LocalAddr()))) {
				t.Errorf("received PSNs %v are not a permutation of 0..199", order)
			}
			if s := a.Stats(); s[stats.FaultDiscarded] != 0 || s[stats.LinkSendErrors] != 0 {
				t.Errorf("sender stats %+v", s)
			}
		})
	}
}

func TestUDPFaultCloseHeld(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.2", "delay=1h")
	write(t, a, psnPackets(10, 0, b.LocalAddr()))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s[stats.FaultDelayed] != 10 || s[stats.FaultDiscarded] != 10 {
		t.Errorf("stats %+v; want 10 delayed and discarded", s)
	}
}

// TestUDPFaultAllocs checks the steady state of a stage that holds nothing.
func TestUDPFaultAllocs(t *testing.T) {
	a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.2", "drop=10%,dup=10%,corrupt=10%,ce=10%,seed=1")
	pkts := linktest.Batch(64, b.LocalAddr())
	for i := 32; i < 64; i++ {
		pkts[i].SrcPort = link.SourcePort(0x42)
	}
	bufs := linktest.ReadBufs(2 * 64)
	round := func() {
		before := a.Stats()
		if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		s := a.Stats()
		want := int(s[stats.FaultSeen] - before[stats.FaultSeen] - (s[stats.FaultDropChance] - before[stats.FaultDropChance]) + (s[stats.FaultDuplicated] - before[stats.FaultDuplicated]) - (s[stats.FaultCorrupted] - before[stats.FaultCorrupted]))
		for got := 0; got < want; {
			n, err := b.ReadBatch(bufs[:want-got])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
	}
	round()
	if allocs := testing.AllocsPerRun(50, round); allocs != 0 {
		t.Errorf("%v allocations per batch of 64, want 0", allocs)
	}
}
