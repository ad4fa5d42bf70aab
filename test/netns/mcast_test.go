package netns_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// bridge is a multicast topology: namespace br holds a Linux bridge with
// IGMP/MLD snooping off, so that it floods a group's packets to every
// port, and each member namespace holds one veth whose peer is a port of
// the bridge.
type bridge struct {
	tp      *topology // ip's path; a is the bridge's namespace
	members []string  // member namespaces
	addrs   []netip.Addr
}

// newBridge creates the bridge and n member namespaces, member i with
// address 198.18.11.(i+1)/24, or 2001:2:0:b::(i+1)/64 with v6 (from
// 2001:2::/48, the IPv6 benchmarking range, RFC 5180), and deletes them
// when the test ends.
func newBridge(t *testing.T, n int, v6 bool) *bridge {
	t.Helper()
	ip, nft := requireTools(t)
	k, pid := topologies.Add(1), os.Getpid()
	prefix := fmt.Sprintf("goroce-t%d-%d", pid, k)
	b := &bridge{tp: &topology{ip: ip, nft: nft, a: prefix + "-br"}}
	addNS := func(ns string) {
		if out, err := tryCommand(ip, "netns", "add", ns); err != nil {
			if strings.Contains(out, "ermission") || strings.Contains(out, "not permitted") {
				t.Skipf("cannot create a network namespace: %v", err)
			}
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := tryCommand(ip, "netns", "del", ns); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
	}
	addNS(b.tp.a)
	br := fmt.Sprintf("gb%d-%d", pid, k)
	command(t, ip, "-n", b.tp.a, "link", "add", "name", br, "type", "bridge", "mcast_snooping", "0")
	command(t, ip, "-n", b.tp.a, "link", "set", "dev", br, "addrgenmode", "none")
	command(t, ip, "-n", b.tp.a, "link", "set", "dev", br, "up")
	for i := range n {
		ns := fmt.Sprintf("%s-m%d", prefix, i+1)
		addNS(ns)
		dev, port := fmt.Sprintf("gr%d-%dm%d", pid, k, i+1), fmt.Sprintf("gp%d-%d-%d", pid, k, i+1)
		command(t, ip, "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port, "netns", b.tp.a)
		command(t, ip, "-n", b.tp.a, "link", "set", "dev", port, "addrgenmode", "none")
		command(t, ip, "-n", b.tp.a, "link", "set", "dev", port, "master", br, "up")
		addr := netip.AddrFrom4([4]byte{198, 18, 11, byte(i + 1)})
		prefixLen := "/24"
		if v6 {
			addr, prefixLen = netip.MustParseAddr("2001:2:0:b::"+strconv.Itoa(i+1)), "/64"
		}
		command(t, ip, "-n", ns, "link", "set", "dev", dev, "addrgenmode", "none")
		args := []string{"-n", ns, "addr", "add", addr.String() + prefixLen, "dev", dev}
		if v6 {
			args = append(args, "nodad") // usable at once, not tentative
		}
		command(t, ip, args...)
		command(t, ip, "-n", ns, "link", "set", "dev", dev, "up")
		command(t, ip, "-n", ns, "link", "set", "dev", "lo", "up")
		b.members = append(b.members, ns)
		b.addrs = append(b.addrs, addr)
	}
	return b
}

// memberEnv, set in the environment, makes the test binary run member
// instead of the tests.
const memberEnv = "GOROCE_NETNS_MEMBER"

// mcastQKey is the Q_Key of every member's QP and datagram.
const mcastQKey = 0x11111111

// TestMulticastThreeNamespaces: three members of one UD multicast group,
// each a process in its own namespace on a bridge. Each attaches a UD QP
// to the group, and when all are ready each sends the same number of
// datagrams to the group. Every member must receive every datagram, its
// own included (IP_MULTICAST_LOOP), each from its sender's QP and address
// and to the group address, as the GRH in the receive buffer shows. The
// same with an IPv6 group, which loopback alone cannot carry.
func TestMulticastThreeNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v6    bool
		group string
	}{
		{"ipv4", false, "239.192.0.7"},
		{"ipv6", true, "ff15::7"}, // site-local scope, transient
	} {
		t.Run(tc.name, func(t *testing.T) {
			const sends = 20
			b := newBridge(t, 3, tc.v6)
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			n := len(b.members)
			var procs []*proc
			var gos []io.WriteCloser
			for i, ns := range b.members {
				p, stdin := startMember(t, ctx, b.tp, exe, fmt.Sprintf("member %d", i+1), ns,
					b.addrs[i].String(), tc.group, strconv.Itoa(sends), strconv.Itoa(n*sends), strconv.Itoa(i))
				procs, gos = append(procs, p), append(gos, stdin)
			}
			qpns := map[netip.Addr]uint32{}
			for i, p := range procs {
				p.waitReady(t, 30*time.Second)
				first, _, _ := strings.Cut(p.stdout.String(), "\n")
				q, ok := strings.CutPrefix(first, "ready ")
				qpn, err := strconv.ParseUint(q, 0, 24)
				if !ok || err != nil {
					t.Fatalf("%s: first line %q, want ready <QPN>", p.name, first)
				}
				if qpn != 0x11+uint64(i) {
					t.Errorf("%s: QPN %#x, want %#x", p.name, qpn, 0x11+i)
				}
				qpns[b.addrs[i]] = uint32(qpn)
			}
			// Every member has joined: let them send.
			for _, w := range gos {
				io.WriteString(w, "go\n")
				w.Close()
			}
			for _, p := range procs {
				if code := p.wait(t, 40*time.Second); code != 0 {
					t.Fatalf("%s exit %d\nstdout:\n%s\nstderr:\n%s", p.name, code, p.stdout, p.stderr)
				}
			}
			group := netip.MustParseAddr(tc.group)
			for i, p := range procs {
				got := map[string]int{}
				lines := strings.Split(strings.TrimSuffix(p.stdout.String(), "\n"), "\n")
				if len(lines) != 2+n*sends || lines[len(lines)-1] != "done" {
					t.Fatalf("%s printed %d lines, want ready, %d datagrams, done:\n%s", p.name, len(lines), n*sends, p.stdout)
				}
				for _, line := range lines[1 : len(lines)-1] {
					src, dst, qpn, payload, err := parseGot(line)
					if err != nil {
						t.Fatalf("%s: %q: %v", p.name, line, err)
					}
					from := netip.MustParseAddr(src)
					if dst != group.String() || qpns[from] != qpn || !strings.HasPrefix(payload, "from "+src+" #") {
						t.Errorf("%s: %q: want a datagram to %v from the QP %#x of its sender", p.name, line, group, qpns[from])
					}
					got[payload]++
				}
				for _, a := range b.addrs {
					for k := range sends {
						if m := fmt.Sprintf("from %v #%d", a, k); got[m] != 1 {
							t.Errorf("member %d (%v) got %q %d times, want once", i+1, b.addrs[i], m, got[m])
						}
					}
				}
			}
		})
	}
}

// parseGot parses a line member prints for a datagram:
// "got src=<addr> dst=<addr> qp=<QPN> <quoted payload>".
func parseGot(line string) (src, dst string, qpn uint32, payload string, err error) {
	f := strings.SplitN(line, " ", 5)
	if len(f) != 5 || f[0] != "got" {
		return "", "", 0, "", fmt.Errorf("not got src=… dst=… qp=… \"…\"")
	}
	var ok [3]bool
	src, ok[0] = strings.CutPrefix(f[1], "src=")
	dst, ok[1] = strings.CutPrefix(f[2], "dst=")
	q, ok2 := strings.CutPrefix(f[3], "qp=")
	n, err := strconv.ParseUint(q, 0, 24)
	if !ok[0] || !ok[1] || !ok2 || err != nil {
		return "", "", 0, "", fmt.Errorf("bad fields %q", f[1:4])
	}
	payload, err = strconv.Unquote(f[4])
	return src, dst, uint32(n), payload, err
}

// startMember runs the test binary in namespace ns as a group member
// (member) with args, and returns it with its standard input.
func startMember(t *testing.T, ctx context.Context, tp *topology, exe, name, ns string, args ...string) (*proc, io.WriteCloser) {
	t.Helper()
	argv := tp.inNS(ns, append([]string{exe}, args...)...)
	p := &proc{name: name, stdout: newOutput(), stderr: newOutput(), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), memberEnv+"=1")
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p, stdin
}

// member is a multicast group member, run by the test binary with
// memberEnv set and the arguments address, group, sends, expect, skip. It
// opens a goroce device on the address, creates skip QPs it does not use
// (so that members' QPNs differ), attaches a UD QP to the group and
// prints "ready <QPN>". When a line arrives on stdin it sends sends
// datagrams "from <address> #<k>" to the group, then prints each of the
// expect datagrams it receives as "got src=<addr> dst=<addr> qp=<QPN>
// <payload>", the addresses taken from the GRH, and "done".
func member(stdin io.Reader, stdout, stderr io.Writer) int {
	if err := runMember(os.Args[1:], stdin, stdout); err != nil {
		fmt.Fprintf(stderr, "member: %v\n", err)
		return 1
	}
	return 0
}

func runMember(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 5 {
		return fmt.Errorf("want arguments address group sends expect skip, got %q", args)
	}
	addr, err := netip.ParseAddr(args[0])
	if err != nil {
		return err
	}
	group, err := netip.ParseAddr(args[1])
	if err != nil {
		return err
	}
	sends, err1 := strconv.Atoi(args[2])
	expect, err2 := strconv.Atoi(args[3])
	skip, err3 := strconv.Atoi(args[4])
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("sends %q, expect %q, skip %q: want numbers", args[2], args[3], args[4])
	}
	dev, err := verbs.Open(verbs.Config{Addr: addr})
	if err != nil {
		return err
	}
	defer dev.Close()
	const slot, nRecv = 2048, 128
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	buf := make([]byte, (nRecv+1)*slot) // the last slot is the send buffer
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	cq, err := dev.CreateCQ(2*nRecv, nil)
	if err != nil {
		return err
	}
	// skip QPs first, so that the members' QPNs differ.
	var qp *verbs.QP
	for range skip + 1 {
		qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: nRecv, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return err
		}
	}
	for _, m := range []struct {
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: mcastQKey}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := qp.Modify(&m.attr, m.mask); err != nil {
			return err
		}
	}
	if err := qp.AttachMcast(verbs.GIDFromAddr(group), 0); err != nil {
		return err
	}
	for i := range nRecv {
		if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{mr.SGE(i*slot, slot)}}}); err != nil {
			return err
		}
	}
	ah, err := pd.CreateAH(verbs.AHAttr{IsGlobal: true, DGID: verbs.GIDFromAddr(group), SGIDIndex: uint8(dev.GIDIndex()), HopLimit: 1})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready %#x\n", qp.QPN())
	if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("waiting for go: %w", err)
	}
	sendBuf := nRecv * slot
	var out strings.Builder
	sent, got := 0, 0
	wc := make([]verbs.WC, 16)
	deadline := time.Now().Add(20 * time.Second)
	for sent < sends || got < expect {
		if time.Now().After(deadline) {
			return fmt.Errorf("after 20 s: %d of %d sends completed, %d of %d datagrams received", sent, sends, got, expect)
		}
		posted := sent
		if posted < sends {
			msg := fmt.Sprintf("from %v #%d", addr, posted)
			copy(buf[sendBuf:], msg)
			_, err := qp.PostSend([]verbs.SendWR{{WRID: 1 << 32, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah,
				RemoteQPN: 0xffffff, RemoteQKey: mcastQKey, SGL: []verbs.SGE{mr.SGE(sendBuf, len(msg))}}})
			if err != nil {
				return err
			}
		}
		for waitSend := posted < sends; ; {
			k := cq.Poll(wc)
			for _, w := range wc[:k] {
				if w.Status != verbs.WCSuccess {
					return fmt.Errorf("completion %+v", w)
				}
				if w.WRID == 1<<32 {
					sent++
					waitSend = false
					continue
				}
				s := buf[int(w.WRID)*slot : int(w.WRID)*slot+int(w.ByteLen)]
				src, dst := grhAddrs(s[:40], addr.Is4())
				fmt.Fprintf(&out, "got src=%v dst=%v qp=%#x %q\n", src, dst, w.SrcQP, s[40:])
				got++
				if _, err := qp.PostRecv([]verbs.RecvWR{{WRID: w.WRID, SGL: []verbs.SGE{mr.SGE(int(w.WRID)*slot, slot)}}}); err != nil {
					return err
				}
			}
			if !waitSend {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		if sent >= sends {
			time.Sleep(time.Millisecond)
		}
	}
	io.WriteString(stdout, out.String()+"done\n")
	return nil
}

// grhAddrs returns the source and destination of the IP header a UD
// receive buffer starts with: an IPv4 header in the last 20 of the GRH's
// 40 bytes, or an IPv6 header in all of them.
func grhAddrs(g []byte, v4 bool) (src, dst netip.Addr) {
	if v4 {
		return netip.AddrFrom4([4]byte(g[32:36])), netip.AddrFrom4([4]byte(g[36:40]))
	}
	return netip.AddrFrom16([16]byte(g[8:24])), netip.AddrFrom16([16]byte(g[24:40]))
}
