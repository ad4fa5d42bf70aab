//go:build linux

package udp

import (
	"bufio"
	"encoding/binary"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
	"golang.org/x/sys/unix"
)

// needRoot skips a test that needs root, saying why.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (packet capture or raw sockets); run the tests as root to check what the kernel puts on the wire")
	}
}

// TestWireHeaders checks what UDP links put on the wire: tcpdump captures
// the loopback traffic of two link pairs (IPv4 and IPv6, from the links' own
// ports and from per-QP ports), and every captured packet must carry a
// correct ICRC over the real IP header, which for IPv4 means DF and the ID
// the send side assumed: 0 from the link's own, unconnected socket
// (the kernel's ip_select_ident_segs), the kernel's per-socket counter, as the link learned
// it, from a connected per-QP port socket (idprobe_linux.go). IPv4 datagrams must
// carry UDP checksum 0, as rxe's do, unless the link sends with GSO (which
// needs checksums, see gso_linux.go), and IPv6 datagrams a checksum (on
// loopback the kernel leaves it partial, so only its presence is checked);
// the receiving links read them all, which the test waits for.
func TestWireHeaders(t *testing.T) {
	needRoot(t)
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (apt-get install tcpdump); cannot check the IP headers the kernel sends")
	}
	// IPv4 without GSO, which needs UDP checksums: what rxe sends. The
	// headers of GSO segments are checked by TestGSOSegmentIDs.
	a4, b4 := udpPairConfig(t, "127.0.0.1", "127.0.0.2", Config{NoGSO: true})
	a6, b6 := udpPair(t, "::1", "::1")

	pcap := filepath.Join(t.TempDir(), "link.pcap")
	filter := "udp and (dst port " + strconv.Itoa(int(b4.LocalAddr().Port())) + " or dst port " + strconv.Itoa(int(b6.LocalAddr().Port())) + ")"
	cmd := exec.Command(tcpdump, "-i", "lo", "-n", "-U", "-s", "0", "-w", pcap, filter)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cmd.Process.Signal(os.Interrupt)
			cmd.Wait()
		}
	}
	defer stop()
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var text []string
		for sc.Scan() {
			text = append(text, sc.Text())
			if strings.Contains(sc.Text(), "listening on") {
				listening <- ""
			}
		}
		listening <- strings.Join(text, "\n")
	}()
	select {
	case msg := <-listening:
		if msg != "" {
			t.Fatalf("tcpdump exited: %s", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tcpdump did not start listening")
	}

	ports := []uint16{0, link.SourcePort(0x11), link.FlowSourcePort(0, 0x12, 0x13)}
	const perLink = 30
	wantID := map[uint16][]uint16{} // per IPv4 source port, the IDs in sending order
	for _, l := range []struct{ a, b *Link }{{a4, b4}, {a6, b6}} {
		pkts := linktest.Batch(perLink, l.b.LocalAddr())
		for i := range pkts {
			pkts[i].SrcPort = ports[i%len(ports)]
		}
		if n, err := l.a.WriteBatch(pkts); n != len(pkts) || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		linktest.ReadN(t, l.b, len(pkts))
		// The per-QP port sockets are connected to their peer and
		// number their datagrams from the kernel's counter.
		if s := l.a.Stats(); s[stats.ConnectedPorts] != 2 || s[stats.UnconnectedPorts] != 0 {
			t.Errorf("%v: ConnectedPorts, UnconnectedPorts = %d, %d; want 2, 0", l.a.LocalAddr(), s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
		}
		if l.a == a4 {
			for i, id := range wantIDs(a4, pkts) {
				port := pkts[i].SrcPort
				if port == 0 {
					port = a4.LocalAddr().Port()
				}
				wantID[port] = append(wantID[port], id)
			}
		}
	}

	want := 2 * perLink
	var got []capture.Datagram
	for deadline := time.Now().Add(10 * time.Second); len(got) < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		got = readPcap(pcap)
	}
	stop()
	got = readPcap(pcap)
	if len(got) != want {
		t.Fatalf("captured %d datagrams, want %d", len(got), want)
	}
	var v4, v6NoSum, qp, ids4 int
	for _, d := range got {
		if d.Malformed != nil {
			t.Errorf("frame %d: %v", d.Frame, d.Malformed)
			continue
		}
		computed, stored, err := wire.ICRCOfIP(d.IP)
		if err != nil || computed != stored {
			t.Errorf("frame %d (%v:%d → %v:%d): ICRC %08x, computed from the captured headers %08x (%v)",
				d.Frame, d.Src, d.SrcPort, d.Dst, d.DstPort, stored, computed, err)
		}
		sum := binary.BigEndian.Uint16(d.IP[d.IPHeaderLen+6:])
		if !d.IPv6 {
			v4++
			id, flags := binary.BigEndian.Uint16(d.IP[4:]), binary.BigEndian.Uint16(d.IP[6:])
			var want uint16
			if q := wantID[d.SrcPort]; len(q) > 0 {
				want, wantID[d.SrcPort] = q[0], q[1:]
			} else {
				t.Errorf("frame %d: an IPv4 datagram from port %d that was not sent", d.Frame, d.SrcPort)
			}
			if id != want || flags != wire.DF {
				t.Errorf("frame %d (port %d): IP ID %d, flags/fragment %#04x; want ID %d, DF only", d.Frame, d.SrcPort, id, flags, want)
			}
			if d.SrcPort != a4.LocalAddr().Port() {
				ids4++
			}
			if sum != 0 && a4.rd.gro == nil {
				t.Errorf("frame %d (%v:%d → %v:%d): UDP checksum %#04x; want 0 on IPv4, as rxe sends (SO_NO_CHECK)",
					d.Frame, d.Src, d.SrcPort, d.Dst, d.DstPort, sum)
			}
		} else if sum == 0 {
			v6NoSum++
		}
		if d.SrcPort != ports[1] && d.SrcPort != ports[2] {
			continue
		}
		qp++
	}
	// On loopback an IPv6 checksum is left partial: the pseudo-header sum,
	// which may itself be 0 for one datagram in 65536, but not for all.
	if v6 := len(got) - v4; v6NoSum == v6 {
		t.Errorf("all %d IPv6 datagrams carry UDP checksum 0, where it is mandatory", v6)
	}
	t.Logf("%d datagrams (%d IPv4 with DF and UDP checksum 0, %d of them from connected per-QP ports with the kernel's counter's IDs, the rest ID 0; %d from per-QP ports in all): every ICRC matches the IP header on the wire", len(got), v4, ids4, qp)
}

// readPcap returns the datagrams in a capture file tcpdump may still be
// writing; a partly written last record ends the list.
func readPcap(path string) []capture.Datagram {
	r, err := capture.Open(path)
	if err != nil {
		return nil
	}
	defer r.Close()
	var out []capture.Datagram
	for {
		d, err := r.Next()
		if err != nil { // io.EOF, or a record still being written
			return out
		}
		out = append(out, d.Clone())
	}
}

// TestUDPRecoversIPv4ID sends, through a raw socket, what rxe sends: an
// IPv4 datagram with a non-zero IP ID that its ICRC covers. The link cannot
// see the ID but must accept the packet; the same packet with a payload bit
// flipped must be dropped.
func TestUDPRecoversIPv4ID(t *testing.T) {
	needRoot(t)
	linktest.CheckNoLeaks(t)
	l, err := Listen(Config{Addr: linktest.FreePort(t, "127.0.0.4")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
	if err != nil {
		t.Skipf("raw socket: %v", err)
	}
	defer unix.Close(fd)

	src := netip.MustParseAddrPort("127.0.0.5:50000")
	dgram := func(id uint16, flip bool) []byte {
		pkt := linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, 7, 200, 9)
		f := wire.IPFields{Src: src.Addr(), Dst: l.LocalAddr().Addr(), SrcPort: src.Port(), DstPort: l.LocalAddr().Port(), ID: id, FlagsFrag: wire.DF}
		link.PutICRC(pkt, &f)
		if flip {
			pkt[100] ^= 4
		}
		b := make([]byte, 28+len(pkt))
		b[0], b[8], b[9] = 0x45, 64, unix.IPPROTO_UDP
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[4:], id)
		binary.BigEndian.PutUint16(b[6:], wire.DF)
		s, d := src.Addr().As4(), l.LocalAddr().Addr().As4()
		copy(b[12:], s[:])
		copy(b[16:], d[:])
		binary.BigEndian.PutUint16(b[20:], src.Port())
		binary.BigEndian.PutUint16(b[22:], l.LocalAddr().Port())
		binary.BigEndian.PutUint16(b[24:], uint16(8+len(pkt))) // UDP checksum 0: none
		copy(b[28:], pkt)
		return b
	}
	to := &unix.SockaddrInet4{Addr: l.LocalAddr().Addr().As4()}
	for _, d := range [][]byte{dgram(0xbeef, true), dgram(0xbeef, false)} {
		if err := unix.Sendto(fd, d, 0, to); err != nil {
			t.Fatal(err)
		}
	}
	got := linktest.ReadN(t, l, 1)
	if want := dgram(0xbeef, false)[28:]; string(got[0].Buf) != string(want) || got[0].Peer != src {
		t.Errorf("got %d bytes from %v, want the good packet from %v", len(got[0].Buf), got[0].Peer, src)
	}
	if s := l.Stats(); s[stats.ICRCErrors] != 1 || s[stats.LinkRcvdPkts] != 1 {
		t.Errorf("stats %+v, want 1 ICRC error, 1 received", s)
	}
}

// TestUDPAcceptsIPv6ZeroChecksum sends, through a raw socket, what rxe sends
// over IPv6: a datagram with UDP checksum 0 (rxe's prepare_udp_hdr zeroes it
// for both families, and its own socket accepts such datagrams). The link
// must read it, relying on the ICRC, which masks the checksum.
func TestUDPAcceptsIPv6ZeroChecksum(t *testing.T) {
	needRoot(t)
	linktest.CheckNoLeaks(t)
	l, err := Listen(Config{Addr: linktest.FreePort(t, "::1")})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_UDP)
	if err != nil {
		t.Skipf("raw socket: %v", err)
	}
	defer unix.Close(fd)

	src := netip.AddrPortFrom(netip.IPv6Loopback(), 50001)
	pkt := linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, 7, 200, 9)
	f := link.SendFields(src, l.LocalAddr())
	link.PutICRC(pkt, &f)
	b := make([]byte, 8+len(pkt))
	binary.BigEndian.PutUint16(b[0:], src.Port())
	binary.BigEndian.PutUint16(b[2:], l.LocalAddr().Port())
	binary.BigEndian.PutUint16(b[4:], uint16(len(b))) // checksum b[6:8] stays 0
	copy(b[8:], pkt)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrInet6{Addr: l.LocalAddr().Addr().As16()}); err != nil {
		t.Fatal(err)
	}
	got := linktest.ReadN(t, l, 1)
	if string(got[0].Buf) != string(pkt) || got[0].Peer != src {
		t.Errorf("got %d bytes from %v, want the packet from %v", len(got[0].Buf), got[0].Peer, src)
	}
}
