package link

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// udpFaultPair opens two UDP links on free ports of the two IPs; the first
// sends with the faults of spec.
func udpFaultPair(t testing.TB, ipA, ipB, spec string) (a, b *UDP) {
	t.Helper()
	cfg, err := ParseFault(spec)
	if err != nil {
		t.Fatal(err)
	}
	a, err = ListenUDP(UDPConfig{Addr: freePort(t, ipA), Fault: cfg})
	if err != nil {
		t.Fatal(err)
	}
	b, err = ListenUDP(UDPConfig{Addr: freePort(t, ipB), ReportCE: true}) // for TestUDPFaultCE
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
	pkts []Packet // copies
	done chan struct{}
}

func collect(t testing.TB, l Link) *collector {
	c := &collector{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		bufs := readBufs(MaxBatch)
		for {
			n, err := l.ReadBatch(bufs)
			if err != nil {
				return
			}
			c.mu.Lock()
			for _, p := range bufs[:n] {
				c.pkts = append(c.pkts, Packet{Buf: bytes.Clone(p.Buf), Peer: p.Peer, CE: p.CE})
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { l.Close(); <-c.done })
	return c
}

func (c *collector) got() []Packet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.pkts)
}

// all returns what the collector has once it holds every packet l counts
// as received: l counts a batch when ReadBatch returns it, before the
// collector has appended it.
func (c *collector) all(t testing.TB, l Link) []Packet {
	t.Helper()
	waitFor(t, "the collector to catch up", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return uint64(len(c.pkts)) >= l.Stats().RcvdPackets
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
			checkNoLeaks(t)
			a, b := udpFaultPair(t, fam.a, fam.b, spec)
			c := collect(t, b)
			sent := psnPackets(n, 0, b.LocalAddr())
			for i := range sent {
				if i%3 == 0 {
					sent[i].SrcPort = SourcePort(0x11)
				}
			}
			for i := 0; i < n; i += 60 {
				write(t, a, sent[i:i+60])
			}
			fs := a.Stats().Fault
			want := fs.Seen - fs.Dropped + fs.Duplicated - fs.Corrupted
			waitFor(t, "all packets", func() bool {
				s := b.Stats()
				return s.RcvdPackets >= want && s.ICRCErrors >= fs.Corrupted
			})
			time.Sleep(20 * time.Millisecond) // anything more would arrive now
			if s := b.Stats(); s.RcvdPackets != want || s.ICRCErrors != fs.Corrupted {
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
			if ms := ma.Stats().Fault; ms != fs {
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
			checkNoLeaks(t)
			a, b := udpFaultPair(t, fam.a, fam.b, "ce=50%,seed=3")
			c := collect(t, b)
			write(t, a, psnPackets(200, 0, b.LocalAddr()))
			waitFor(t, "200 packets", func() bool { return b.Stats().RcvdPackets >= 200 })
			marked := 0
			for _, p := range c.all(t, b) {
				if p.CE {
					marked++
				}
			}
			if s := a.Stats().Fault; uint64(marked) != s.CEMarked || marked < 70 || marked > 130 {
				t.Errorf("%d arrived marked CE, the stage marked %d; want equal, about 100", marked, s.CEMarked)
			}
		})
	}
}

// TestUDPReadsCE sends from a plain socket whose TOS or traffic class is
// ECT(0), then CE: a link with UDPConfig.ReportCE must report CE on the
// second only, one without it on neither.
func TestUDPReadsCE(t *testing.T) {
	for _, fam := range udpFamilies {
		for _, report := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ReportCE=%v", fam.name, report), func(t *testing.T) {
				readsCE(t, fam.a, fam.b, fam.name == "IPv4", report)
			})
		}
	}
}

// readsCE is TestUDPReadsCE for one family and one ReportCE setting.
func readsCE(t *testing.T, addrA, addrB string, is4, report bool) {
	checkNoLeaks(t)
	l, err := ListenUDP(UDPConfig{Addr: freePort(t, addrB), ReportCE: report})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(addrA), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	setDF(t, s, is4)
	from := plain(s.LocalAddr().(*net.UDPAddr).AddrPort())
	rc, err := s.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for i, tos := range []int{0x02, 0x03} {
		var serr error
		rc.Control(func(fd uintptr) {
			if is4 {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS, tos)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tos)
			}
		})
		if serr != nil {
			t.Fatal(serr)
		}
		p := buildPacket(make([]byte, MaxPacket), 7, uint32(i), 10, 0)
		f := sendFields(from, l.LocalAddr())
		putICRC(p, &f)
		if _, err := s.WriteToUDPAddrPort(p, l.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	got := readUntil(t, l, func(got []Packet) bool { return len(got) >= 2 })
	if got[0].CE || got[1].CE != report {
		t.Errorf("CE = %v, %v; want false (ECT(0)), %v (CE, reported: %v)", got[0].CE, got[1].CE, report, report)
	}
}

// TestUDPFaultHolds delays and reorders over UDP: the release goroutine
// sends what the stage holds, nothing is lost.
func TestUDPFaultHolds(t *testing.T) {
	for _, tc := range []struct{ spec string }{{"delay=20ms"}, {"reorder=50%,seed=2"}, {"delay=5ms,jitter=5ms,seed=4"}} {
		t.Run(tc.spec, func(t *testing.T) {
			checkNoLeaks(t)
			a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.3", tc.spec)
			c := collect(t, b)
			start := time.Now()
			var first time.Duration
			write(t, a, psnPackets(200, 0, b.LocalAddr()))
			waitFor(t, "200 packets", func() bool {
				if first == 0 && b.Stats().RcvdPackets > 0 {
					first = time.Since(start)
				}
				return b.Stats().RcvdPackets >= 200
			})
			if tc.spec == "delay=20ms" && first < 20*time.Millisecond {
				t.Errorf("first packet after %v, want at least 20 ms", first)
			}
			order := psns(c.all(t, b))
			if sorted := slices.Sorted(slices.Values(order)); !slices.Equal(sorted, psns(psnPackets(200, 0, b.LocalAddr()))) {
				t.Errorf("received PSNs %v are not a permutation of 0..199", order)
			}
			if s := a.Stats(); s.Fault.Discarded != 0 || s.SendErrors != 0 {
				t.Errorf("sender stats %+v", s)
			}
		})
	}
}

func TestUDPFaultCloseHeld(t *testing.T) {
	checkNoLeaks(t)
	a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.2", "delay=1h")
	write(t, a, psnPackets(10, 0, b.LocalAddr()))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats().Fault; s.Delayed != 10 || s.Discarded != 10 {
		t.Errorf("stats %+v; want 10 delayed and discarded", s)
	}
}

func TestUDPFaultBadConfig(t *testing.T) {
	l, err := ListenUDP(UDPConfig{Addr: freePort(t, "127.0.0.1"), Fault: FaultConfig{Reorder: -1}})
	if err == nil {
		l.Close()
	}
	if !errors.Is(err, ErrBadFault) {
		t.Errorf("ListenUDP with Reorder -1: %v, want ErrBadFault", err)
	}
}

// TestUDPFaultAllocs checks the steady state of a stage that holds nothing.
func TestUDPFaultAllocs(t *testing.T) {
	a, b := udpFaultPair(t, "127.0.0.1", "127.0.0.2", "drop=10%,dup=10%,corrupt=10%,ce=10%,seed=1")
	pkts := batch(64, b.LocalAddr())
	for i := 32; i < 64; i++ {
		pkts[i].SrcPort = SourcePort(0x42)
	}
	bufs := readBufs(2 * 64)
	round := func() {
		before := a.Stats().Fault
		if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		s := a.Stats().Fault
		want := int(s.Seen - before.Seen - (s.Dropped - before.Dropped) + (s.Duplicated - before.Duplicated) - (s.Corrupted - before.Corrupted))
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
