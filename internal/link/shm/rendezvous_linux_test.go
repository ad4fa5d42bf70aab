//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// TestSameHostFallback: a peer without the same-host path, or on another
// address family, is reached over UDP.
func TestSameHostFallback(t *testing.T) {
	a, err := listen(linktest.FreePort(t, "127.0.0.1"), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c, err := udp.Listen(udp.Config{Addr: linktest.FreePort(t, "127.0.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := linktest.Batch(6, c.LocalAddr())
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	linktest.CheckReceived(t, linktest.ReadN(t, c, len(sent)), sent, a.LocalAddr(), c.LocalAddr())
	if s := a.Stats(); s[stats.SameHostPkts] != 0 || s[stats.LinkSentPkts] != uint64(len(sent)) {
		t.Errorf("SameHostSent %d, SentPackets %d; want 0 and %d", s[stats.SameHostPkts], s[stats.LinkSentPkts], len(sent))
	}
}

// TestSameHostPeerCloses: when the receiving link closes, the sender sees
// the ring closed and sends over UDP again, to whoever holds the address
// next.
func TestSameHostPeerCloses(t *testing.T) {
	a, b := sameHostPair(t)
	addr := b.LocalAddr()
	a.WriteBatch(linktest.Batch(1, addr))
	linktest.ReadN(t, b, 1)
	b.Close()
	b2, err := udp.Listen(udp.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	sent := linktest.Batch(3, addr)
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	linktest.CheckReceived(t, linktest.ReadN(t, b2, len(sent)), sent, a.LocalAddr(), addr)
	if s := a.Stats(); s[stats.SameHostPkts] != 1 {
		t.Errorf("SameHostSent = %d, want 1 (the packet before the close)", s[stats.SameHostPkts])
	}
}

// TestSameHostClose: Close ends a reader waiting on rings and socket, and
// the link's socket file goes with it.
func TestSameHostClose(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := sameHostPair(t)
	a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	linktest.ReadN(t, b, 1)
	errc := make(chan error, 1)
	go func() { _, err := b.ReadBatch(linktest.ReadBufs(1)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	path := b.path
	b.Close()
	linktest.WantClosed(t, "waiting ReadBatch", linktest.WaitErr(t, errc))
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket file %s after Close: %v", path, err)
	}
	a.Close()
	_, err := a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	linktest.WantClosed(t, "WriteBatch after Close", err)
}

// TestSameHostUnsafeDir: a rendezvous directory that others could enter is
// refused.
func TestSameHostUnsafeDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755) // past the umask
	_, err := listen(linktest.FreePort(t, "127.0.0.1"), Config{Dir: dir})
	if err == nil {
		t.Fatal("a world-readable rendezvous directory was accepted")
	}
	t.Log(err)
	os.Chmod(dir, 0o700)
	l, err := listen(linktest.FreePort(t, "127.0.0.1"), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}

// TestSameHostStaleSocket: a socket file left by a link that died is
// replaced.
func TestSameHostStaleSocket(t *testing.T) {
	addr := linktest.FreePort(t, "127.0.0.1")
	dir, err := rendezvousDir(stats.Dir(), nil)
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
	l, err := listen(addr, Config{})
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
	good := linktest.Batch(3, linktest.MustParse("127.0.0.2:4791"))
	for _, p := range good {
		f := link.SendFields(linktest.MustParse("127.0.0.1:4791"), linktest.MustParse("127.0.0.2:4791"))
		link.PutICRC(p.Buf, &f)
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
		s := &Mux{laddr: linktest.MustParse("127.0.0.2:4791"), deferICRC: deferICRC, stats: stats.New()}
		u := s
		clear(fuzzRing[:shmHdrSize+8*shmSlotSize]) // all that an iteration writes
		in := &shmIn{peer: netip.MustParseAddr("127.0.0.1"), ring: &shmRing{mem: fuzzRing}, doorbell: -1}
		s.in = []*shmIn{in}
		// data: records of length (4), port (2), bytes to copy (2), bytes.
		for i := uint64(0); len(data) >= 8 && i < 8; i++ {
			slot := in.ring.slot(i)
			copy(slot[:shmSlotHdr], data[:6])
			n := min(int(binary.LittleEndian.Uint16(data[6:])), len(data)-8, link.MaxPacket)
			copy(slot[shmSlotHdr:], data[8:8+n])
			data = data[8+n:]
		}
		in.ring.u64(shmOffTail).Store(tail)
		pkts := linktest.ReadBufs(link.MaxBatch)
		for range 3 {
			n := s.readRings(pkts, lend)
			for _, p := range pkts[:n] {
				b := p.Buf
				if lend {
					b = p.Lent
				}
				if len(b) < link.MinPacket || len(b) > link.MaxPacket {
					t.Fatalf("returned a packet of %d bytes", len(b))
				}
				// A packet with its ICRC left to the borrower (only lent
				// ones) passes the borrower's check only if it passes the
				// link's own.
				if p.ICRCPending && (!lend || !deferICRC || wire.CheckDeferredICRC(b, p.ICRCSeed) && !link.CheckICRC(p.Peer, u.laddr, b, nil)) {
					t.Fatalf("a pending ICRC (lend %v, defer %v) that the link's check would refuse", lend, deferICRC)
				}
				if !p.ICRCPending && !link.CheckICRC(p.Peer, u.laddr, b, nil) {
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
