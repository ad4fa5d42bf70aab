//go:build linux

package udp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
	"golang.org/x/sys/unix"
)

// needGSO skips a test when the kernel has no UDP_SEGMENT and UDP_GRO.
func needGSO(t testing.TB) {
	t.Helper()
	if !gsoSupport() {
		t.Skip("the kernel has no UDP_SEGMENT/UDP_GRO (Linux 5.0 or later)")
	}
}

// gsoBatch returns runs that exercise the grouping: 40 full-size packets
// (runs of 15 by the byte limit), a shorter one that ends a run, 70 small
// ones (runs of 64 by the segment limit) and one of each size.
func gsoBatch(peer netip.AddrPort) []link.Packet {
	var sizes []int
	for range 40 {
		sizes = append(sizes, 4096)
	}
	sizes = append(sizes, 1000)
	for range 70 {
		sizes = append(sizes, 8)
	}
	sizes = append(sizes, 0, 1, 64, 1000, 1024, 4096)
	pkts := make([]link.Packet, len(sizes))
	for i, n := range sizes {
		pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), n, byte(i)), Peer: peer}
	}
	return pkts
}

// TestUDPGSORoundTrip sends GSO runs between two links, which receive them
// whole with UDP_GRO and split them: every packet must arrive intact, in
// order, with the ICRC its segment number gives it.
func TestUDPGSORoundTrip(t *testing.T) {
	needGSO(t)
	for _, tc := range []struct{ name, a, b string }{{"IPv4", "127.0.0.1", "127.0.0.2"}, {"IPv6", "::1", "::1"}} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPair(t, tc.a, tc.b)
			pkts := gsoBatch(b.LocalAddr())
			if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := linktest.ReadN(t, b, len(pkts))
			linktest.CheckReceivedIDs(t, got, pkts, gsoIDs(pkts), a.LocalAddr(), b.LocalAddr())
			s := b.Stats()
			if s[stats.LinkRcvdPkts] != uint64(len(pkts)) || s[stats.ICRCErrors]+s[stats.LinkMalformed]+s[stats.LinkOversized] != 0 {
				t.Errorf("receiver stats %+v", s)
			}
			if s := a.Stats(); s[stats.LinkSentPkts] != uint64(len(pkts)) {
				t.Errorf("sender stats %+v", s)
			}
		})
	}
}

// TestUDPGSOWire reads what a link sends with a plain socket, with and
// without UDP_GRO. With it, a run must arrive as one datagram whose
// UDP_GRO control message gives the segment size; without it, the kernel
// segments the run and each datagram must be one packet with the ICRC of
// its segment number, which is what a receiver that sees the IP header
// checks (the IP header itself is checked by TestGSOSegmentIDs).
func TestUDPGSOWire(t *testing.T) {
	needGSO(t)
	for _, gro := range []bool{false, true} {
		name := "without UDP_GRO"
		if gro {
			name = "with UDP_GRO"
		}
		t.Run(name, func(t *testing.T) {
			a, err := Listen(Config{Addr: linktest.FreePort(t, "127.0.0.1")})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rc, _ := c.SyscallConn()
			rc.Control(func(fd uintptr) { err = setBuffer(int(fd), unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, 4<<20) })
			if err != nil {
				t.Fatal(err)
			}
			if gro {
				rc.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) })
				if err != nil {
					t.Fatal(err)
				}
			}
			to := link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
			pkts := gsoBatch(to)
			if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			ids := gsoIDs(pkts)
			buf := make([]byte, 1<<16)
			oob := make([]byte, 64)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for i, datagrams := 0, 0; i < len(pkts); datagrams++ {
				n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
				if err != nil {
					t.Fatalf("after %d of %d packets: %v", i, len(pkts), err)
				}
				seg := groSize(oob[:oobn])
				if seg == 0 {
					seg = n
				}
				// With UDP_GRO a datagram is a whole run: ids[i] is 0.
				if gro && ids[i] != 0 {
					t.Fatalf("datagram %d starts at packet %d, segment %d of a run", datagrams, i, ids[i])
				}
				for off := 0; off < n; off, i = off+seg, i+1 {
					p := buf[off:min(off+seg, n)]
					// The ICRC, checked below, is the link's to fill in
					// Buf or only on the wire (Packet.Buf).
					if len(p) != len(pkts[i].Buf) || string(p[:len(p)-4]) != string(pkts[i].Buf[:len(p)-4]) {
						t.Fatalf("packet %d: contents differ (len %d, want %d)", i, len(p), len(pkts[i].Buf))
					}
					f := link.SendFields(link.Plain(from), to)
					f.ID = ids[i]
					if c, s := f.ICRC(p[:len(p)-4]), wire.StoredICRC(p); c != s {
						t.Errorf("packet %d: ICRC %08x, want %08x (ID %d)", i, s, c, ids[i])
					}
				}
				if !gro && n != len(pkts[i-1].Buf) {
					t.Errorf("datagram %d: %d bytes without UDP_GRO: not segmented", datagrams, n)
				}
				if gro && i < len(pkts) && ids[i] != 0 {
					t.Errorf("datagram %d ends inside a run, at packet %d", datagrams, i)
				}
			}
		})
	}
}

// groSize returns the segment size of a UDP_GRO control message in oob, or 0.
func groSize(oob []byte) int {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		if int(h.Len) < unix.CmsgLen(0) || int(h.Len) > len(oob) {
			return 0
		}
		if h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO {
			return int(binary.NativeEndian.Uint32(oob[unix.CmsgLen(0):]))
		}
		oob = oob[min(unix.CmsgSpace(int(h.Len)-unix.CmsgLen(0)), len(oob)):]
	}
	return 0
}

// TestGSOSegmentIDs checks the ICRC/ID scheme against the kernel's real
// segmentation: a tun device has no UDP segmentation offload (like the tap
// of a QEMU guest), so a super-packet routed to it is segmented in
// software, and the test reads the IP packets from the device. Segment k
// must carry IPv4 ID k and DF from the link's own port, base+k from a
// connected per-QP port socket (the kernel's counter, which the link
// learned and counts: wantIDs), and every segment a correct ICRC over its
// real IP header. Needs root and /dev/net/tun; run it in a private network
// namespace (the device is named gso-tun*, its addresses are 198.18.0.0/24
// and fd00:198:18::/64).
func TestGSOSegmentIDs(t *testing.T) {
	needRoot(t)
	needGSO(t)
	ipBin, err := exec.LookPath("ip")
	if err != nil {
		t.Skip("no ip command")
	}
	tun, name := openTun(t)
	defer tun.Close()
	for _, args := range [][]string{
		{"link", "set", name, "mtu", "9000", "up"},
		{"addr", "add", "198.18.0.1/24", "dev", name},
		{"-6", "addr", "add", "fd00:198:18::1/64", "dev", name, "nodad"},
	} {
		if out, err := exec.Command(ipBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	for _, tc := range []struct {
		name, local, peer string
		port              uint16 // per-QP source port; 0: the link's own
	}{
		{"IPv4", "198.18.0.1", "198.18.0.2", 0},
		{"IPv6", "fd00:198:18::1", "fd00:198:18::2", 0},
		{"IPv4/connected port", "198.18.0.1", "198.18.0.2", link.SourcePort(0x21)},
		{"IPv6/connected port", "fd00:198:18::1", "fd00:198:18::2", link.SourcePort(0x21)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Listen(Config{Addr: netip.AddrPortFrom(netip.MustParseAddr(tc.local), 47910)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			peer := netip.AddrPortFrom(netip.MustParseAddr(tc.peer), wire.UDPPort)
			pkts := gsoBatch(peer)
			for i := range pkts {
				pkts[i].SrcPort = tc.port
			}
			// Twice: the second batch's IDs follow on from the first's.
			if n, err := a.WriteBatch(pkts[:len(pkts)/2]); n != len(pkts)/2 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			ids := wantIDs(a, pkts[:len(pkts)/2])
			if n, err := a.WriteBatch(pkts[len(pkts)/2:]); n != len(pkts)-len(pkts)/2 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			ids = append(ids, wantIDs(a, pkts[len(pkts)/2:])...)
			if s := a.Stats(); tc.port != 0 && (s[stats.ConnectedPorts] != 1 || s[stats.UnconnectedPorts] != 0) {
				t.Errorf("ConnectedPorts, UnconnectedPorts = %d, %d; want 1, 0", s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
			}
			buf := make([]byte, 1<<16)
			deadline := time.Now().Add(5 * time.Second)
			for i := 0; i < len(pkts); {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d packets came out of the tun device", i, len(pkts))
				}
				tun.SetReadDeadline(deadline)
				n, err := tun.Read(buf)
				if err != nil {
					t.Fatalf("reading the tun device after %d packets: %v", i, err)
				}
				ip := buf[:n]
				v6 := ip[0]>>4 == 6
				if v6 != strings.HasPrefix(tc.name, "IPv6") || (!v6 && ip[9] != unix.IPPROTO_UDP) || (v6 && ip[6] != unix.IPPROTO_UDP) {
					continue // neighbour discovery, router solicitations
				}
				computed, stored, err := wire.ICRCOfIP(ip)
				if err != nil || computed != stored {
					t.Errorf("packet %d: ICRC %08x over the real IP header, stored %08x (%v)", i, computed, stored, err)
				}
				hl := 40
				if !v6 {
					hl = int(ip[0]&0x0f) * 4
					id, flags := binary.BigEndian.Uint16(ip[4:]), binary.BigEndian.Uint16(ip[6:])
					if id != ids[i] || flags != wire.DF {
						t.Errorf("packet %d: IP ID %d, flags %#04x; want ID %d, DF", i, id, flags, ids[i])
					}
				}
				if p := ip[hl+8:]; len(p) != len(pkts[i].Buf) || string(p[:len(p)-4]) != string(pkts[i].Buf[:len(p)-4]) {
					t.Errorf("packet %d: contents differ (len %d, want %d)", i, len(p), len(pkts[i].Buf))
				}
				i++
			}
		})
	}
}

// openTun creates a tun device (IFF_TUN, no packet information) named
// gso-tun followed by the process ID, or skips the test.
func openTun(t *testing.T) (*os.File, string) {
	t.Helper()
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Skipf("no tun device: %v", err)
	}
	name := "gso-tun" + itoa(os.Getpid()%100000)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.EPERM) {
			t.Skip("creating a tun device needs CAP_NET_ADMIN")
		}
		t.Fatalf("TUNSETIFF: %v", err)
	}
	return os.NewFile(uintptr(fd), name), name
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// TestUDPGSOAllocs checks the steady state with GSO runs and GRO reads:
// writing 64 full-size packets (runs of 15) and reading them back allocates
// nothing.
func TestUDPGSOAllocs(t *testing.T) {
	needGSO(t)
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	pkts := make([]link.Packet, 64)
	for i := range pkts {
		pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), 4096, byte(i)), Peer: b.LocalAddr()}
	}
	linktest.CheckRoundTripAllocs(t, a, b, pkts, b.ReadBatch) // the first round allocates the receive buffers
	// Reading in place, as the device's reader does.
	linktest.CheckRoundTripAllocs(t, a, b, pkts, func(bufs []link.Packet) (int, error) {
		n, err := b.ReadLent(bufs, true)
		if n > 0 {
			b.ReturnLent()
		}
		return n, err
	})
}

// TestSegments: a link segments (CapSegment, Segments) exactly when its
// socket sends UDP_SEGMENT runs: not with NoGSO or PlainSend (a fault
// stage's, which sends single datagrams).
func TestSegments(t *testing.T) {
	needGSO(t)
	elsewhere := netip.MustParseAddrPort("127.0.9.9:4791")
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	if !a.Segments(b.LocalAddr()) || !a.Segments(elsewhere) || a.Caps()&link.CapSegment == 0 {
		t.Error("a plain UDP link does not segment")
	}
	for name, cfg := range map[string]Config{"NoGSO": {NoGSO: true}, "PlainSend": {PlainSend: true}} {
		a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", cfg)
		if a.Segments(b.LocalAddr()) || a.Caps()&link.CapSegment != 0 {
			t.Errorf("%s: the link segments", name)
		}
	}
}

// TestUDPGROCE: a super-packet marked ECN CE reaches the GRO reader with
// its segment size and its TOS, and every segment reports CE, also after
// single datagrams, whose control messages are shorter, went through the
// same message headers, and when it is read one packet at a time. The
// reader sets up again only the message headers that the kernel wrote
// back (mmsg.readFrom): one left with a single datagram's control length
// would cut the super-packet's TOS (its GRO segment size comes first) and
// lose the mark.
func TestUDPGROCE(t *testing.T) {
	_, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", Config{ReportCE: true})
	if b.rd.gro == nil {
		t.Skip("no UDP_GRO")
	}
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	control := func(f func(fd int) error) {
		var serr error
		rc.Control(func(fd uintptr) { serr = f(int(fd)) })
		if serr != nil {
			t.Fatal(serr)
		}
	}
	control(sockOpts{gso: true}.apply) // DF, and the UDP checksum that UDP_SEGMENT needs
	from := link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
	setTOS := func(tos int) {
		control(func(fd int) error { return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, tos) })
	}
	// send writes pkts from c as one datagram each, or with gso as one
	// super-packet whose segment k carries IPv4 ID k.
	send := func(pkts []link.Packet, gso bool) {
		f := link.SendFields(from, b.LocalAddr())
		var run []byte
		for k := range pkts {
			if gso {
				f.ID = uint16(k)
			}
			link.PutICRC(pkts[k].Buf, &f)
			if !gso {
				if _, err := c.WriteToUDPAddrPort(pkts[k].Buf, b.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				continue
			}
			run = append(run, pkts[k].Buf...)
		}
		if !gso {
			return
		}
		oob := make([]byte, unix.CmsgSpace(2))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		h.SetLen(unix.CmsgLen(2))
		binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(len(pkts[0].Buf)))
		if _, _, err := c.WriteMsgUDPAddrPort(run, oob, b.LocalAddr()); err != nil {
			t.Fatalf("%v (%d bytes, segments of %d)", err, len(run), len(pkts[0].Buf))
		}
	}
	equal := func(n int) []link.Packet {
		pkts := make([]link.Packet, n)
		for i := range pkts {
			pkts[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), 1000, byte(i)), Peer: b.LocalAddr()}
		}
		return pkts
	}
	for round, perRead := range []int{link.MaxBatch, 1, 3} {
		singles := linktest.Batch(4, b.LocalAddr())
		setTOS(0)
		send(singles, false)
		if got := linktest.ReadN(t, b, len(singles)); len(got) != len(singles) {
			t.Fatalf("round %d: %d single datagrams read, want %d", round, len(got), len(singles))
		}
		run := equal(5)
		setTOS(ecnCE) // marked as a congested router marks it
		send(run, true)
		got := linktest.PollN(t, b, linktest.ReadBufs(perRead), len(run))
		linktest.CheckReceivedIDs(t, got, run, gsoIDs(run), from, b.LocalAddr())
		for i, p := range got {
			if !p.CE {
				t.Errorf("round %d, segment %d of the super-packet: CE not reported", round, i)
			}
		}
	}
}
