// Package perftest is goroce's twin of linux-rdma/perftest: the eight
// ib_{send,write,read,atomic}_{bw,lat} tools with perftest's flags, its
// out-of-band exchange over TCP (byte-compatible, so either side may be
// the real perftest), its measurement rules and its printed tables.
package perftest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/stamp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/verbs"
)

// Main runs the tool t with args (without the program name) and returns
// the exit status: 0 on success, 1 on any failure, as perftest.
func Main(t Test, args []string, stdout, stderr io.Writer) int {
	p, err := Parse(t, args)
	switch {
	case errors.Is(err, ErrHelp):
		Usage(stdout, t)
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintf(stdout, "Version: %s (goroce)\n", Version)
		return 0
	case err != nil:
		fmt.Fprintf(stderr, " %v\n", err)
		fmt.Fprintf(stderr, " See %s --help.\n", t.Name())
		return 1
	}
	p.asTool()
	if os.Getenv(stats.PrintCountersEnv) == "1" {
		p.Counters = stderr
	}
	if path := os.Getenv(CPUProfileEnv); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintf(stderr, " %s: %v\n", t.Name(), err)
			return 1
		}
		defer stop()
	}
	if err := Run(p, nil, stdout); err != nil {
		fmt.Fprintf(stderr, " %s: %v\n", t.Name(), err)
		return 1
	}
	return 0
}

// CPUProfileEnv names the environment variable that has a tool write a CPU
// profile of its run to the file it names (runtime/pprof): the profiles
// tools/perf/pgo.sh merges into the build's profile (cmd/default.pgo).
const CPUProfileEnv = "GOROCE_CPUPROFILE"

// startCPUProfile starts a CPU profile into a new file at path and returns
// what ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// asTool sets up what a tool's own process does beyond goroce bench, which
// runs both ends in one process: it runs on one P (oneP), and a bandwidth
// test may poll (busySpin).
func (p *Params) asTool() {
	if p.Kind == BW {
		p.PollBW = true
	}
	oneP()
}

// oneP runs a tool's Go code on one P (runtime.GOMAXPROCS(1)) unless the
// user set GOMAXPROCS. perftest runs in one thread; here the device's
// reader runs while the application waits (or the application drives the
// device, busySpin), and the kernel's half of each send runs in its system
// call, so one P is what the process needs. With more, the Go scheduler
// wakes an idle P each time the reader readies the application's goroutine
// or the reverse, and the QPs' state moves between cores, which costs
// more than a second P brings wherever waking an idle CPU is dear, as on
// a small virtual machine. A poller on one P takes the socket from the
// reader (verbs' dispatcher.handOff), so the latency tools, whose both
// sides poll, keep their typical latency on one P and have shorter tails.
// Chosen by measurement: docs/design/tuning.md#one-p.
func oneP() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}

// Run runs a parsed test. dev, if not nil, is the device to use (goroce
// bench passes one); otherwise Run opens the device -d names, or picks one
// from the out-of-band connection's addresses.
func Run(p *Params, dev *verbs.Device, out io.Writer) error {
	c, err := dial(p, out)
	if err != nil {
		return err
	}
	defer c.Close()
	if dev == nil {
		addr, err := pickDevice(p, c)
		if err != nil {
			return err
		}
		if dev, err = verbs.Open(verbs.Config{Addr: addr}); err != nil {
			return fmt.Errorf("open device: %w", err)
		}
		defer dev.Close()
	}
	if p.Counters != nil {
		defer func() { io.WriteString(p.Counters, stats.Line(dev.Counters())) }() // before Close
	}
	conn := NewConn(c, p.Server != "")
	local := dev.QueryPort().ActiveMTU
	if p.MTU != 0 {
		local = verbs.MTU(mtuEnum(p.MTU))
	}
	return session(p, conn, int(local), dev.Name(), out, func(mtu int) (plane, int, error) {
		s, err := open(p, dev, p.Server != "", out)
		if err != nil {
			return nil, 0, fmt.Errorf("create resources: %w", err)
		}
		s.mtu = verbs.MTU(mtu)
		return s, s.gidIdx, nil
	})
}

// plane is the RDMA side of a test, which session drives between its
// exchanges; side is the real one, and tests of the exchange fake it.
type plane interface {
	local() []Dest
	setRemote([]Dest)
	connect() error
	prepare() error
	bwClient(size int) (*bwTimes, error)
	bwServer(size int) (*bwTimes, error)
	latency(size int) (posted []int64, count int, elapsed int64, err error)
	serve(wait func() error) error
	close()
}

// session runs a test over an out-of-band connection: the exchanges of
// versions, system data and MTU, then the test's own sequence.
// localMTU is this side's IB MTU enum; newPlane creates the RDMA side for
// the negotiated MTU and returns it with its GID index.
func session(p *Params, conn *Conn, localMTU int, devName string, out io.Writer, newPlane func(mtu int) (plane, int, error)) error {
	if err := conn.Versions(); err != nil {
		return err
	}
	if _, _, err := conn.SysData(cycleBuffer, cacheLine); err != nil {
		return err
	}
	m, err := conn.MTU(localMTU)
	if err != nil {
		return err
	}
	mtu := verbs.MTU(m).Bytes()
	if p.Conn == UD && p.Size > mtu { // check_mtu: a datagram fits one packet
		if !p.All && p.reqSize {
			return fmt.Errorf("max message size in UD cannot be greater than MTU (%d)", mtu)
		}
		fmt.Fprintf(os.Stderr, " Max msg size in UD is MTU %d\n Changing to this MTU\n", mtu)
		p.Size = mtu
	}
	pl, gidIdx, err := newPlane(m)
	if err != nil {
		return err
	}
	defer pl.close()
	p.devName, p.mtuBytes, p.gidIndex = devName, mtu, gidIdx
	r := &runner{pl: pl, p: p, c: conn, out: out, client: conn.client, mtu: mtu, my: pl.local()}
	p.header(out, r.client)
	switch {
	case p.Kind == BW && p.Verb == Send:
		return r.sendBW()
	case p.Kind == BW:
		return r.rdmaBW()
	default:
		return r.lat()
	}
}

// dial makes the out-of-band connection: the client connects to the
// server's port, the server waits for one client (perftest listens on
// every address).
func dial(p *Params, out io.Writer) (net.Conn, error) {
	port := strconv.Itoa(p.Port)
	if p.Server != "" {
		var c net.Conn
		err := p.NetNS.Do(func() (err error) {
			c, err = net.DialTimeout("tcp", net.JoinHostPort(p.Server, port), 10*time.Second)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("couldn't connect to %s:%s: %w", p.Server, port, err)
		}
		return c, nil
	}
	var ln net.Listener
	err := p.NetNS.Do(func() (err error) {
		ln, err = net.Listen("tcp", ":"+port)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %s: %w", port, err)
	}
	defer ln.Close()
	fmt.Fprint(out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	c, err := ln.Accept()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return c, nil
}

// pickDevice chooses the device's address. -d names it (a device name, an
// address or an interface); without -d it is the out-of-band connection's
// local address, which routes to the peer. A client whose connection runs
// from a loopback address to itself (server and client on one host) takes
// the next loopback address, since the server's device holds the first.
func pickDevice(p *Params, c net.Conn) (netip.Addr, error) {
	if p.Device != "" {
		d, err := verbs.LookupDevice(p.Device)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("-d %s: %w", p.Device, err)
		}
		return d.Addr, nil
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if p.Server != "" && local == remote && local.IsLoopback() {
		if next := local.Next(); next.IsLoopback() {
			return next, nil
		}
	}
	return local, nil
}

// runner carries one test through perftest's sequence of exchanges.
type runner struct {
	pl     plane
	p      *Params
	c      *Conn
	out    io.Writer
	client bool
	mtu    int
	my     []Dest
}

// shakeAll exchanges every QP's record (one handshake per QP).
func (r *runner) shakeAll(print bool) error {
	rems := make([]Dest, len(r.my))
	for i, d := range r.my {
		rem, err := r.c.HandShake(d)
		if err != nil {
			return err
		}
		rems[i] = rem
		if print {
			r.p.address(r.out, "remote", rem)
		}
	}
	r.pl.setRemote(rems)
	return nil
}

// barrier is a handshake used only to wait for the peer.
func (r *runner) barrier() error {
	_, err := r.c.HandShake(r.my[0])
	return err
}

func (r *runner) printLocal() {
	for _, d := range r.my {
		r.p.address(r.out, "local", d)
	}
}

// rdmaBW is ib_write_bw, ib_read_bw and ib_atomic_bw (write_bw.c,
// read_bw.c, atomic_bw.c): records, connect, records again to print,
// a barrier; the server then waits for the client's results.
func (r *runner) rdmaBW() error {
	p, s := r.p, r.pl
	if err := r.shakeAll(false); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	r.printLocal()
	if err := r.shakeAll(true); err != nil {
		return err
	}
	if err := r.barrier(); err != nil {
		return err
	}
	p.bwHeader(r.out)
	if !r.client && !p.Duplex {
		// The server answers until the client ends the test.
		if err := s.serve(r.barrier); err != nil {
			return err
		}
		rem, err := r.c.BWReports(BWReport{})
		if err != nil {
			return err
		}
		p.bwRow(r.out, rem, nil)
		if err := r.c.Close(r.my[0]); err != nil {
			return err
		}
		fmt.Fprint(r.out, resultLine)
		return nil
	}
	var rep BWReport
	for _, size := range p.sizes(r.mtu) {
		if p.Duplex {
			if err := r.barrier(); err != nil {
				return err
			}
		}
		t, err := s.bwClient(size)
		if err != nil {
			return err
		}
		if p.Duplex && p.All {
			if err := r.barrier(); err != nil {
				return err
			}
		}
		rep = p.report(t)
		if !p.Duplex {
			p.bwRow(r.out, rep, nil)
			continue
		}
		rem, err := r.c.BWReports(rep)
		if err != nil {
			return err
		}
		p.bwRow(r.out, rep, &rem)
	}
	fmt.Fprint(r.out, resultLine)
	if !p.Duplex {
		if err := r.barrier(); err != nil {
			return err
		}
		if _, err := r.c.BWReports(rep); err != nil {
			return err
		}
	}
	return r.c.Close(r.my[0])
}

// sendBW is ib_send_bw (send_bw.c): both sides measure, the client what
// it sent and the server what it received.
func (r *runner) sendBW() error {
	p, s := r.p, r.pl
	if err := r.shakeAll(false); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	if err := r.barrier(); err != nil {
		return err
	}
	r.printLocal()
	if err := r.shakeAll(true); err != nil {
		return err
	}
	p.bwHeader(r.out)
	for _, size := range p.sizes(r.mtu) {
		if err := s.prepare(); err != nil {
			return err
		}
		if err := r.barrier(); err != nil {
			return err
		}
		var t *bwTimes
		var err error
		switch {
		case p.Duplex:
			type result struct {
				t   *bwTimes
				err error
			}
			recv := make(chan result, 1)
			go func() {
				t, err := s.bwServer(size)
				recv <- result{t, err}
			}()
			t, err = s.bwClient(size)
			if rr := <-recv; err == nil {
				err = rr.err
			}
		case r.client:
			t, err = s.bwClient(size)
		default:
			t, err = s.bwServer(size)
		}
		if err != nil {
			return err
		}
		rep := p.report(t)
		if !p.Duplex || p.Duration > 0 {
			p.bwRow(r.out, rep, nil)
		} else {
			rem, err := r.c.BWReports(rep)
			if err != nil {
				return err
			}
			p.bwRow(r.out, rep, &rem)
		}
		if p.All {
			if err := r.barrier(); err != nil {
				return err
			}
		}
	}
	fmt.Fprint(r.out, resultLine)
	return r.c.Close(r.my[0])
}

// lat is the four latency tests (write_lat.c, send_lat.c, read_lat.c,
// atomic_lat.c), each with its own order of exchanges.
func (r *runner) lat() error {
	p, s := r.p, r.pl
	if p.Verb != Send {
		if err := r.barrier(); err != nil { // the extra first handshake of the RDMA latency tests
			return err
		}
	}
	if err := r.shakeAll(false); err != nil {
		return err
	}
	if err := s.connect(); err != nil {
		return err
	}
	if p.Verb == Send {
		if err := r.barrier(); err != nil {
			return err
		}
	}
	r.printLocal()
	if err := r.shakeAll(true); err != nil {
		return err
	}
	if p.Verb != Send {
		if err := r.barrier(); err != nil {
			return err
		}
	}
	if (p.Verb == Read || p.Verb == Atomic) && !r.client {
		if err := s.serve(func() error { return r.c.Close(r.my[0]) }); err != nil {
			return err
		}
		fmt.Fprint(r.out, resultLine)
		return nil
	}
	p.latHeader(r.out)
	for _, size := range p.sizes(r.mtu) {
		if p.Verb == Send {
			if err := s.prepare(); err != nil {
				return err
			}
			if err := r.barrier(); err != nil {
				return err
			}
		}
		posted, count, elapsed, err := s.latency(size)
		if err != nil {
			return err
		}
		if p.Duration > 0 {
			p.latDurRow(r.out, size, count, elapsed)
		} else {
			p.latRow(r.out, p.latency(r.out, posted, size))
		}
	}
	fmt.Fprint(r.out, resultLine)
	if stamp.Enabled { // a build with -tags goroce_stamps
		stamp.Report(os.Stderr)
	}
	if p.Verb == Write {
		return nil // ib_write_lat ends without a closing handshake
	}
	return r.c.Close(r.my[0])
}
