//go:build linux

package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
	"golang.org/x/sys/unix"
)

func TestUDPRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, a, b string
		noGSO      bool
	}{
		{"IPv4", "127.0.0.1", "127.0.0.2", false},
		{"IPv6", "::1", "::1", false},
		{"IPv4/NoGSO", "127.0.0.1", "127.0.0.2", true},
		{"IPv6/NoGSO", "::1", "::1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPairConfig(t, tc.a, tc.b, Config{NoGSO: tc.noGSO})
			if (a.rd.gro == nil) != (tc.noGSO || !gsoSupport()) {
				t.Errorf("NoGSO %v: link receives with UDP_GRO: %v", tc.noGSO, a.rd.gro != nil)
			}
			pkts := linktest.Batch(64, b.LocalAddr())
			if n, err := a.WriteBatch(pkts); n != 64 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := linktest.ReadN(t, b, 64)
			checkReceived(t, got, pkts, a.LocalAddr(), b.LocalAddr())
			// And back, to the address the packets came from.
			back := linktest.Batch(3, got[0].Peer)
			if n, err := b.WriteBatch(back); n != 3 || err != nil {
				t.Fatalf("WriteBatch back = %d, %v", n, err)
			}
			checkReceived(t, linktest.ReadN(t, a, 3), back, b.LocalAddr(), a.LocalAddr())
			if s := b.Stats(); s[stats.LinkRcvdPkts] != 64 || s[stats.LinkSentPkts] != 3 || s[stats.ICRCErrors]+s[stats.LinkMalformed]+s[stats.LinkOversized] != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// TestUDPDropsBadDatagrams sends from a plain socket (with DF set, as rxe
// and goroce do): a good packet, one with a wrong ICRC, one too short and one
// longer than the read buffer. Only the good one may arrive.
func TestUDPDropsBadDatagrams(t *testing.T) {
	for _, tc := range []struct{ name, ip string }{{"IPv4", "127.0.0.3"}, {"IPv6", "::1"}} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			l, err := Listen(Config{Addr: linktest.FreePort(t, tc.ip)})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(tc.ip), 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			setDF(t, c, tc.ip != "::1")
			from := link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())
			packet := func(n int) []byte {
				b := linktest.BuildPacket(make([]byte, link.MaxPacket), 7, 1, n, 3)
				f := link.SendFields(from, l.LocalAddr())
				link.PutICRC(b, &f)
				return b
			}
			bad := packet(100)
			bad[20] ^= 0x40
			for _, d := range [][]byte{bad, packet(10)[:link.MinPacket-1], packet(4000), packet(100)} {
				if _, err := c.WriteToUDPAddrPort(d, l.LocalAddr()); err != nil {
					t.Fatal(err)
				}
			}
			bufs := []link.Packet{{Buf: make([]byte, 0, 1000)}}
			n, err := l.ReadBatch(bufs)
			if n != 1 || err != nil {
				t.Fatalf("ReadBatch = %d, %v", n, err)
			}
			if want := packet(100); string(bufs[0].Buf) != string(want) || bufs[0].Peer != from {
				t.Errorf("got %d bytes from %v, want the good %d-byte packet from %v", len(bufs[0].Buf), bufs[0].Peer, len(want), from)
			}
			if s := l.Stats(); s[stats.ICRCErrors] != 1 || s[stats.LinkMalformed] != 1 || s[stats.LinkOversized] != 1 || s[stats.LinkRcvdPkts] != 1 {
				t.Errorf("stats %+v, want one each of ICRC error, malformed, oversized, received", s)
			}
		})
	}
}

func setDF(t *testing.T, c *net.UDPConn, v4 bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) { serr = sockOpts{is6: !v4}.apply(int(fd)) })
	if serr != nil {
		t.Fatal(serr)
	}
}

// TestUDPSourcePorts sends groups of packets from per-QP source ports,
// interleaved with the link's own port, and checks each arrives from the
// port it asked for with an ICRC over that port.
func TestUDPSourcePorts(t *testing.T) {
	for _, tc := range []struct{ name, a, b string }{
		{"IPv4", "127.0.0.1", "127.0.0.2"},
		{"IPv6", "::1", "::1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := udpPair(t, tc.a, tc.b)
			ports := []uint16{0, link.SourcePort(0x11), link.SourcePort(0x11), 0, link.SourcePort(0x12), link.FlowSourcePort(0, 0x13, 0x14), link.SourcePort(0x11)}
			pkts := linktest.Batch(len(ports)*3, b.LocalAddr())
			for i := range pkts {
				pkts[i].SrcPort = ports[i/3]
			}
			if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := linktest.ReadN(t, b, len(pkts))
			ids := wantIDs(a, pkts)
			for i := range pkts {
				from := a.LocalAddr()
				if pkts[i].SrcPort != 0 {
					from = netip.AddrPortFrom(from.Addr(), pkts[i].SrcPort)
				}
				linktest.CheckReceivedIDs(t, got[i:i+1], pkts[i:i+1], ids[i:i+1], from, b.LocalAddr())
			}
			if n := len(a.ports.m); n != 3 {
				t.Errorf("%d per-port sockets open, want 3", n)
			}
			// Each is connected to its one peer (idprobe_linux.go).
			if s := a.Stats(); s[stats.ConnectedPorts] != 3 || s[stats.UnconnectedPorts] != 0 {
				t.Errorf("ConnectedPorts, UnconnectedPorts = %d, %d; want 3, 0", s[stats.ConnectedPorts], s[stats.UnconnectedPorts])
			}
			// mmsg.call makes raw system calls, which must never block.
			checkNonBlocking(t, a.sock.fd)
			for port, ps := range a.ports.m {
				if ps != nil {
					checkNonBlocking(t, ps.sock.fd)
				} else {
					t.Errorf("port %d: no socket", port)
				}
			}
			// Whatever is sent to a per-port socket is dropped by the
			// kernel and never disturbs the link.
			back := linktest.Batch(1, netip.AddrPortFrom(a.LocalAddr().Addr(), link.SourcePort(0x11)))
			if n, err := b.WriteBatch(back); n != 1 || err != nil {
				t.Fatalf("WriteBatch to a per-port socket = %d, %v", n, err)
			}
			// A write from the port the last write used (which the link
			// keeps at hand) fails once the link is closed.
			a.Close()
			late := linktest.Batch(1, b.LocalAddr())
			late[0].SrcPort = link.SourcePort(0x11)
			n, err := a.WriteBatch(late)
			if n != 0 {
				t.Errorf("WriteBatch after Close sent %d packets", n)
			}
			linktest.WantClosed(t, "WriteBatch after Close", err)
		})
	}
}

// TestUDPSourcePortFallback holds a port without SO_REUSEPORT: packets that
// ask for it leave from the link's own port, counted, with a matching ICRC.
func TestUDPSourcePortFallback(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	holder, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.LocalAddr().Addr(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	taken := holder.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	pkts := linktest.Batch(4, b.LocalAddr())
	for i := range pkts {
		pkts[i].SrcPort = taken
	}
	if n, err := a.WriteBatch(pkts); n != 4 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	checkReceived(t, linktest.ReadN(t, b, 4), pkts, a.LocalAddr(), b.LocalAddr())
	if s := a.Stats(); s[stats.PortFallbacks] != 4 {
		t.Errorf("PortFallbacks = %d, want 4", s[stats.PortFallbacks])
	}
}

func TestUDPRefuses(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	good := linktest.Batch(1, b.LocalAddr())[0]
	for _, tc := range []struct {
		name string
		p    link.Packet
		want error
	}{
		{"short", link.Packet{Buf: make([]byte, link.MinPacket-1), Peer: b.LocalAddr()}, link.ErrPacketSize},
		{"long", link.Packet{Buf: make([]byte, link.MaxPacket+1), Peer: b.LocalAddr()}, link.ErrPacketSize},
		{"IPv6 peer", link.Packet{Buf: good.Buf, Peer: linktest.MustParse("[::1]:5000")}, link.ErrAddrFamily},
		{"long, other port", link.Packet{Buf: make([]byte, link.MaxPacket+1), Peer: b.LocalAddr(), SrcPort: link.SourcePort(9)}, link.ErrPacketSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := a.WriteBatch([]link.Packet{good, tc.p, good})
			if n != 1 || !errors.Is(err, tc.want) {
				t.Errorf("WriteBatch = %d, %v; want 1, %v", n, err, tc.want)
			}
		})
	}
	linktest.ReadN(t, b, 4)
	for _, addr := range []string{"0.0.0.0:5000", "[::]:5000", ""} {
		var ap netip.AddrPort
		if addr != "" {
			ap = linktest.MustParse(addr)
		}
		if l, err := Listen(Config{Addr: ap}); err == nil {
			l.Close()
			t.Errorf("Listen(%q) succeeded, want an error: a wildcard address hides the IP the ICRC covers", addr)
		}
	}
}

func TestUDPDefaults(t *testing.T) {
	linktest.CheckNoLeaks(t)
	l, err := Listen(Config{Addr: linktest.MustParse("127.0.0.9:0")})
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Skip("port 4791 on 127.0.0.9 is taken")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if got := l.LocalAddr().Port(); got != wire.UDPPort {
		t.Errorf("port %d, want %d", got, wire.UDPPort)
	}
	fd := l.sock.fd
	rbuf, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF)
	mtu, _ := unix.GetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER)
	if mtu != unix.IP_PMTUDISC_DO {
		t.Errorf("IP_MTU_DISCOVER = %d, want IP_PMTUDISC_DO", mtu)
	}
	t.Logf("SO_RCVBUF = %d (asked for %d; the kernel doubles it, and without CAP_NET_ADMIN rmem_max caps it)", rbuf, defaultSocketBuffer)
}

// TestUDPClose checks that Close unblocks a ReadBatch blocked in the
// netpoller and later calls fail, and that Close can be repeated.
func TestUDPClose(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	a.WriteBatch(append(linktest.Batch(1, b.LocalAddr()), link.Packet{Buf: linktest.Batch(1, b.LocalAddr())[0].Buf, Peer: b.LocalAddr(), SrcPort: link.SourcePort(3)}))
	linktest.ReadN(t, b, 2)
	errc := make(chan error, 1)
	go func() { _, err := a.ReadBatch(linktest.ReadBufs(8)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	linktest.WantClosed(t, "blocked ReadBatch", linktest.WaitErr(t, errc))
	_, err := a.ReadBatch(linktest.ReadBufs(1))
	linktest.WantClosed(t, "ReadBatch after Close", err)
	_, err = a.WriteBatch(linktest.Batch(1, b.LocalAddr()))
	linktest.WantClosed(t, "WriteBatch after Close", err)
	p := linktest.Batch(1, b.LocalAddr())
	p[0].SrcPort = link.SourcePort(3)
	_, err = a.WriteBatch(p)
	linktest.WantClosed(t, "WriteBatch from a per-port socket after Close", err)
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestUDPSocketsOutsideNetpoller checks which epoll sets watch a UDP
// link's sockets (sockfd_linux.go): while a ReadBatch waits, the link's
// own set and no other; once Interrupt has ended the wait, none; a
// per-port socket, never. A socket of package net, in the Go netpoller,
// is the control that the check finds a watched socket.
func TestUDPSocketsOutsideNetpoller(t *testing.T) {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	pkts := linktest.Batch(2, b.LocalAddr())
	pkts[1].SrcPort = link.SourcePort(5)
	if _, err := a.WriteBatch(pkts); err != nil {
		t.Fatal(err)
	}
	linktest.ReadN(t, b, 2)
	control, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(linktest.FreePort(t, "127.0.0.3")))
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	controlFD := -1
	rc, _ := control.SyscallConn()
	rc.Control(func(fd uintptr) { controlFD = int(fd) })
	a.ports.Lock()
	portFD := a.ports.m[link.SourcePort(5)].sock.fd
	a.ports.Unlock()
	own := a.set.epfd

	errc := make(chan error, 1)
	go func() { _, err := a.ReadBatch(linktest.ReadBufs(1)); errc <- err }()
	time.Sleep(20 * time.Millisecond) // let it wait
	sets := epollSets(t)
	if len(sets[controlFD]) == 0 {
		t.Fatalf("the check is blind: package net's socket (fd %d) is in no epoll set (%v)", controlFD, sets)
	}
	if got := sets[a.sock.fd]; len(got) != 1 || got[0] != own {
		t.Errorf("a waiting reader's socket (fd %d) is in epoll sets %v, want only the link's own (%d)", a.sock.fd, got, own)
	}
	if got := sets[portFD]; len(got) != 0 {
		t.Errorf("a per-port socket (fd %d) is in epoll sets %v", portFD, got)
	}

	a.Interrupt()
	if err := linktest.WaitErr(t, errc); err != nil {
		t.Fatalf("interrupted ReadBatch: %v", err)
	}
	if got := epollSets(t)[a.sock.fd]; len(got) != 0 {
		t.Errorf("after Interrupt the socket (fd %d) is in epoll sets %v, want none", a.sock.fd, got)
	}
	if got := epollSets(t)[b.sock.fd]; len(got) != 0 {
		t.Errorf("a socket that no ReadBatch waited on (fd %d) is in epoll sets %v", b.sock.fd, got)
	}
}

// epollSets returns, for each descriptor that an epoll set of the process
// watches, the descriptors of those sets (from /proc/self/fdinfo, whose
// "tfd:" lines list an epoll set's targets).
func epollSets(t *testing.T) map[int][]int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Skip(err)
	}
	sets := map[int][]int{}
	for _, e := range ents {
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed since
		}
		ep, _ := strconv.Atoi(e.Name())
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" {
				if fd, err := strconv.Atoi(f[1]); err == nil {
					sets[fd] = append(sets[fd], ep)
				}
			}
		}
	}
	return sets
}

// TestUDPAllocs checks the steady state: writing a batch of 64 (from two
// source ports) and reading it back allocates nothing.
func TestUDPAllocs(t *testing.T) {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	pkts := linktest.Batch(64, b.LocalAddr())
	for i := 32; i < 64; i++ {
		pkts[i].SrcPort = link.SourcePort(0x42)
	}
	linktest.CheckRoundTripAllocs(t, a, b, pkts, b.ReadBatch) // the first round opens the per-port socket
}

// TestUDPReadBatchKeepsBuffers drops packets in the middle of one recvmmsg
// batch: the good ones must come first, in order, and pkts must still hold
// exactly the caller's buffers.
func TestUDPReadBatchKeepsBuffers(t *testing.T) {
	linktest.CheckNoLeaks(t)
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.LocalAddr().Addr(), 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	setDF(t, c, true)
	cAddr := link.Plain(c.LocalAddr().(*net.UDPAddr).AddrPort())

	pkts := linktest.Batch(8, b.LocalAddr())
	bad := map[int]bool{0: true, 3: true, 4: true, 6: true}
	var want []link.Packet
	for i, p := range pkts {
		if !bad[i] {
			if n, err := a.WriteBatch(pkts[i : i+1]); n != 1 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			want = append(want, p)
			continue
		}
		f := link.SendFields(cAddr, b.LocalAddr())
		link.PutICRC(p.Buf, &f)
		p.Buf[wire.BTHLen] ^= 0x10 // a payload bit: no IP ID can explain it
		if _, err := c.WriteToUDPAddrPort(p.Buf, b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}

	bufs := linktest.ReadBufs(16)
	arrays := func() map[*byte]bool {
		m := map[*byte]bool{}
		for _, p := range bufs {
			m[&p.Buf[:1][0]] = true
		}
		return m
	}
	before := arrays()
	var got []link.Packet
	for len(got) < len(want) {
		n, err := b.ReadBatch(bufs)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range bufs[:n] {
			got = append(got, link.Packet{Buf: append([]byte(nil), p.Buf...), Peer: p.Peer})
		}
		after := arrays()
		for p := range before {
			if !after[p] {
				t.Fatalf("after ReadBatch pkts holds %d distinct buffers, not the caller's %d", len(after), len(before))
			}
		}
	}
	checkReceived(t, got, want, a.LocalAddr(), b.LocalAddr())
	if s := b.Stats(); s[stats.ICRCErrors] != 4 {
		t.Errorf("ICRCErrors = %d, want 4", s[stats.ICRCErrors])
	}
}

// TestGroupLinkFamilies opens a group link for an IPv4 and an IPv6 group
// on loopback: each socket is built for its own family (an IPv6 group
// once panicked in netip.Addr.As4).
func TestGroupLinkFamilies(t *testing.T) {
	for _, tc := range []struct{ group, iface string }{
		{"239.192.0.9", "127.0.0.1"},
		{"ff15::9", "::1"},
	} {
		t.Run(tc.group, func(t *testing.T) {
			l, err := Listen(Config{Addr: netip.AddrPortFrom(netip.MustParseAddr(tc.group), 0),
				Interface: netip.MustParseAddr(tc.iface)})
			if err != nil {
				t.Fatalf("listen on %s via %s: %v", tc.group, tc.iface, err)
			}
			l.Close()
		})
	}
}

// TestUDPWaitAllocs: a ReadBatch that has to wait for its packet (the
// reader's usual case between bursts) allocates nothing either.
func TestUDPWaitAllocs(t *testing.T) {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	pkts := linktest.Batch(1, b.LocalAddr())
	bufs := linktest.ReadBufs(link.MaxBatch)
	send, sent := make(chan struct{}), make(chan struct{})
	go func() {
		for range send {
			time.Sleep(2 * time.Millisecond) // the reader waits by then
			a.WriteBatch(pkts)
			sent <- struct{}{}
		}
	}()
	defer close(send)
	round := func() {
		send <- struct{}{}
		if n, err := b.ReadBatch(bufs); n != 1 || err != nil {
			t.Fatalf("ReadBatch = %d, %v", n, err)
		}
		<-sent
		for i := range bufs {
			bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
		}
	}
	round()
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Errorf("%v allocations per waiting read", allocs)
	}
}

// checkNonBlocking fails t unless fd has O_NONBLOCK set.
func checkNonBlocking(t *testing.T, fd int) {
	t.Helper()
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		t.Errorf("socket %d is blocking (flags %#x)", fd, fl)
	}
}

// TestUDPReadsCE sends from a plain socket whose TOS or traffic class is
// ECT(0), then CE: a link with Config.ReportCE must report CE on the
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
	linktest.CheckNoLeaks(t)
	l, err := Listen(Config{Addr: linktest.FreePort(t, addrB), ReportCE: report})
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
	from := link.Plain(s.LocalAddr().(*net.UDPAddr).AddrPort())
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
		p := linktest.BuildPacket(make([]byte, link.MaxPacket), 7, uint32(i), 10, 0)
		f := link.SendFields(from, l.LocalAddr())
		link.PutICRC(p, &f)
		if _, err := s.WriteToUDPAddrPort(p, l.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	got := linktest.ReadUntil(t, l, func(got []link.Packet) bool { return len(got) >= 2 })
	if got[0].CE || got[1].CE != report {
		t.Errorf("CE = %v, %v; want false (ECT(0)), %v (CE, reported: %v)", got[0].CE, got[1].CE, report, report)
	}
}
