// Package bench is goroce's one-command benchmark: a perftest-style
// bandwidth and latency test between two goroce devices of one process on
// two loopback addresses, and the same transfer over TCP in the same run,
// so that the result reads as a ratio measured on the same machine at the
// same moment. The pieces it is made of (Ends and Pair, the TCP
// comparison's ends, LastColumn, Spread, NewVeth) are exported for the
// performance laboratory, tools/perf, which measures with them too.
package bench

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/perftest"
	"github.com/goroce/goroce/internal/syncbuf"
	"github.com/goroce/goroce/verbs"
)

// Config says what to measure.
type Config struct {
	Verb     perftest.Verb // Write (default), Read or Send
	Size     int           // bandwidth test message size; 0 means 65536
	Iters    int           // bandwidth test iterations; 0 means perftest's default
	QPs      int           // QPs (and TCP connections); 0 means 1
	Duration int           // seconds; 0 runs Iters
	LatIters int           // latency test iterations; 0 means 1000
	NoLat    bool          // skip the latency test
	Server   netip.Addr    // device addresses; zero means 127.0.0.1 and 127.0.0.2
	Client   netip.Addr
	// ServerNS and ClientNS are the network namespaces the two ends
	// live in: their devices, the out-of-band connections and the TCP
	// and UDP comparisons' sockets (goroce bench -veth). Nil: the
	// process's own.
	ServerNS, ClientNS *netns.NS
	// Profile, if set, receives a CPU profile (pprof) of the goroce
	// bandwidth test.
	Profile io.Writer
	// Trace, if set, receives a Go execution trace (go tool trace) of
	// the goroce bandwidth test: where goroutines wait for each other.
	Trace io.Writer
	// Counters prints the devices' non-zero counters after the bandwidth
	// test: retransmissions, sequence errors and drops show there.
	Counters bool
	// SameHost opens the two devices with the same-host path
	// (verbs.Config.SameHost), and the report says so.
	SameHost bool
	// Procs, if not 0, is GOMAXPROCS for the goroce bandwidth test, as
	// the bandwidth tools set it (perftest.Main); the TCP tests and the
	// latency test run with the process's own.
	Procs int
	// Poll makes the goroce bandwidth test's waits busy-poll, on both
	// sides, as the bandwidth tools' do (perftest.Params.PollBW): each
	// device then keeps a core busy for the length of the test.
	Poll bool
}

// Result holds the figures of one run.
type Result struct {
	Size              int     // bandwidth test message size in bytes
	BW, TCPBW         float64 // MiB/s
	Lat, TCPLat       float64 // t_typical, µs, one way
	BWRatio, LatRatio float64 // goroce / TCP
	// CPU seconds of this process (both ends) per GB moved.
	CPUPerGB, TCPCPUPerGB float64
	// UDPBW is the UDP ceiling (MiB/s; 0 when not measured): the same
	// bytes over the kernel's UDP path alone, at its best (GSO and GRO),
	// with nothing of RDMA on top; UDPLost the fraction of them the
	// receiving socket dropped, UDPCPUPerGB its CPU seconds per GB.
	UDPBW, UDPLost, UDPCPUPerGB float64
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Run runs the benchmark and prints perftest's tables and the comparison.
func Run(cfg Config, out io.Writer) (*Result, error) {
	if cfg.Size == 0 {
		cfg.Size = 65536
	}
	if cfg.QPs == 0 {
		cfg.QPs = 1
	}
	if cfg.LatIters == 0 {
		cfg.LatIters = 1000
	}
	if !cfg.Server.IsValid() {
		cfg.Server, cfg.Client = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	}
	e, err := OpenEnds(cfg.Server, cfg.Client, cfg.ServerNS, cfg.ClientNS, cfg.SameHost)
	if err != nil {
		return nil, err
	}
	defer e.Close()

	fmt.Fprintf(out, "goroce bench: %s between two goroce devices (%v, %v) and over TCP, in one run\n",
		map[perftest.Verb]string{perftest.Write: "RDMA WRITE", perftest.Read: "RDMA READ", perftest.Send: "SEND"}[cfg.Verb],
		cfg.Server, cfg.Client)
	if cfg.ServerNS != nil || cfg.ClientNS != nil {
		fmt.Fprintf(out, "goroce bench: the server's end in network namespace %s, the client's in %s\n", nsName(cfg.ServerNS), nsName(cfg.ClientNS))
	}
	if cfg.Poll {
		fmt.Fprintf(out, "goroce bench: the bandwidth test's waits busy-poll on both sides (-poll)\n")
	}
	bwArgs := []string{"-s", strconv.Itoa(cfg.Size), "-q", strconv.Itoa(cfg.QPs)}
	if cfg.Duration > 0 {
		bwArgs = append(bwArgs, "-D", strconv.Itoa(cfg.Duration))
	} else if cfg.Iters > 0 {
		bwArgs = append(bwArgs, "-n", strconv.Itoa(cfg.Iters))
	}
	bwTest := perftest.Test{Verb: cfg.Verb, Kind: perftest.BW}
	if cfg.Profile != nil {
		if err := pprof.StartCPUProfile(cfg.Profile); err != nil {
			return nil, err
		}
	}
	if cfg.Trace != nil {
		if err := trace.Start(cfg.Trace); err != nil {
			return nil, err
		}
	}
	cpu0 := cpuTime()
	var bwOut string
	WithProcs(cfg.Procs, func() { bwOut, err = Pair(bwTest, bwArgs, cfg.Poll, e, out) })
	cpuGoroce := cpuTime() - cpu0
	if cfg.Counters {
		printCounters(out, e.srv, e.cli)
	}
	if cfg.Profile != nil {
		pprof.StopCPUProfile()
	}
	if cfg.Trace != nil {
		trace.Stop()
	}
	if err != nil {
		return nil, err
	}
	res := &Result{Size: cfg.Size}
	if res.BW, err = LastColumn(bwOut, 3); err != nil {
		return nil, err
	}
	p, err := perftest.Parse(bwTest, bwArgs)
	if err != nil {
		return nil, err
	}
	bytesPerConn := int64(p.Size) * int64(p.Iters)
	cpu0 = cpuTime()
	var tcpBytes int64
	res.TCPBW, tcpBytes, err = TCPBandwidth(cfg, p.Size, bytesPerConn)
	if err != nil {
		return nil, fmt.Errorf("TCP bandwidth: %w", err)
	}
	cpuTCP := cpuTime() - cpu0
	if cfg.Duration == 0 {
		res.CPUPerGB = cpuGoroce.Seconds() / (float64(bytesPerConn) * float64(cfg.QPs) / 1e9)
	}
	res.TCPCPUPerGB = cpuTCP.Seconds() / (float64(tcpBytes) / 1e9)
	res.BWRatio = res.BW / res.TCPBW
	// The ceiling for one QP's large messages over UDP sockets (not for
	// the same-host path, which uses none).
	if !cfg.SameHost && cfg.QPs == 1 && p.Size >= 4096 && cfg.Server.Is4() && cfg.Client.Is4() {
		cpu0 := cpuTime()
		if res.UDPBW, res.UDPLost, err = udpCeiling(cfg, tcpBytes); err != nil {
			return nil, fmt.Errorf("UDP ceiling: %w", err)
		}
		res.UDPCPUPerGB = (cpuTime() - cpu0).Seconds() / (float64(tcpBytes) / 1e9)
	}
	if !cfg.NoLat {
		latTest := perftest.Test{Verb: cfg.Verb, Kind: perftest.Lat}
		if cfg.Verb == perftest.Send || cfg.Verb == perftest.Read || cfg.Verb == perftest.Write {
			latOut, err := Pair(latTest, []string{"-n", strconv.Itoa(cfg.LatIters)}, false, e, out)
			if err != nil {
				return nil, err
			}
			if res.Lat, err = LastColumn(latOut, 4); err != nil {
				return nil, err
			}
			if res.TCPLat, err = TCPLatency(cfg, 2); err != nil {
				return nil, fmt.Errorf("TCP latency: %w", err)
			}
			res.LatRatio = res.Lat / res.TCPLat
		}
	}
	if cfg.SameHost {
		fmt.Fprint(out, "\n goroce over the same-host path (shared memory); TCP on the same addresses, same message sizes, same run:\n")
	} else {
		fmt.Fprint(out, "\n TCP on the same addresses, same message sizes, same run:\n")
	}
	fmt.Fprintf(out, " %-30s %12s %12s %14s\n", "", "goroce", "TCP", "goroce/TCP")
	fmt.Fprintf(out, " %-30s %12.2f %12.2f %13.2fx\n", fmt.Sprintf("BW average[MiB/sec], %d B", cfg.Size), res.BW, res.TCPBW, res.BWRatio)
	if res.Lat > 0 {
		fmt.Fprintf(out, " %-30s %12.2f %12.2f %13.2fx\n", "t_typical[usec], 2 B, one way", res.Lat, res.TCPLat, res.LatRatio)
	}
	if res.CPUPerGB > 0 {
		fmt.Fprintf(out, " %-30s %12.2f %12.2f %13.2fx\n", "CPU seconds per GB (both ends)", res.CPUPerGB, res.TCPCPUPerGB, res.CPUPerGB/res.TCPCPUPerGB)
	}
	if res.UDPBW > 0 {
		fmt.Fprintf(out, " UDP alone (GSO and GRO, no RDMA), same bytes: %.2f MiB/s, %.2fx TCP, %.2f CPU seconds per GB (%.1f%% dropped); goroce moves %.2fx of it\n",
			res.UDPBW, res.UDPBW/res.TCPBW, res.UDPCPUPerGB, 100*res.UDPLost, res.BW/res.UDPBW)
	}
	fmt.Fprint(out, " (bandwidth: above 1x goroce is faster; latency and CPU: below 1x goroce is better)\n")
	return res, nil
}

// WithProcs runs f with GOMAXPROCS set to procs (unchanged if 0), and
// sets it back.
func WithProcs(procs int, f func()) {
	if procs > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	}
	f()
}

// Ends are the two sides of a run: each one's device and the network
// namespace its sockets live in (nil: the process's own).
type Ends struct {
	srv, cli     *verbs.Device
	srvNS, cliNS *netns.NS
}

// openEnds opens the server's and the client's devices.
func OpenEnds(server, client netip.Addr, srvNS, cliNS *netns.NS, sameHost bool) (*Ends, error) {
	e := &Ends{srvNS: srvNS, cliNS: cliNS}
	var err error
	if e.srv, err = verbs.Open(verbs.Config{Addr: server, SameHost: sameHost, NetNS: srvNS.Name()}); err != nil {
		return nil, fmt.Errorf("open server device: %w", err)
	}
	if e.cli, err = verbs.Open(verbs.Config{Addr: client, SameHost: sameHost, NetNS: cliNS.Name()}); err != nil {
		e.srv.Close()
		return nil, fmt.Errorf("open client device: %w", err)
	}
	return e, nil
}

func (e *Ends) Close() {
	e.cli.Close()
	e.srv.Close()
}

// nsName names a namespace for the report.
func nsName(ns *netns.NS) string {
	if ns == nil {
		return "(the process's own)"
	}
	return ns.Name()
}

// Pair runs a perftest test between the two devices and prints the
// client's report; it returns the client's output. The TCP port is picked
// free, and again if something took it before the server bound it.
func Pair(t perftest.Test, args []string, poll bool, e *Ends, out io.Writer) (string, error) {
	for try := 0; ; try++ {
		o, err := pairOnce(t, args, poll, e, out)
		if err != nil && try < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		return o, err
	}
}

func pairOnce(t perftest.Test, args []string, poll bool, e *Ends, out io.Writer) (string, error) {
	port, err := FreePort(e.srvNS)
	if err != nil {
		return "", err
	}
	args = append([]string{"-p", strconv.Itoa(port)}, args...)
	sp, err := perftest.Parse(t, args)
	if err != nil {
		return "", err
	}
	cp, err := perftest.Parse(t, append(args, e.srv.Addr().Addr().String()))
	if err != nil {
		return "", err
	}
	sp.PollBW, cp.PollBW = poll, poll
	sp.NetNS, cp.NetNS = e.srvNS, e.cliNS
	var srvOut syncbuf.Buffer
	srvDone := make(chan error, 1)
	go func() { srvDone <- perftest.Run(sp, e.srv, &srvOut) }()
	// The server listens before it prints its banner.
	for deadline := time.Now().Add(5 * time.Second); !srvOut.Contains("Waiting for client"); {
		select {
		case err := <-srvDone:
			return "", fmt.Errorf("%s server: %w", t.Name(), err)
		default:
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%s server did not start", t.Name())
		}
		time.Sleep(time.Millisecond)
	}
	var cliOut bytes.Buffer
	cliErr := perftest.Run(cp, e.cli, io.MultiWriter(&cliOut, out))
	srvErr := <-srvDone
	if cliErr != nil {
		return "", fmt.Errorf("%s client: %w", t.Name(), cliErr)
	}
	if srvErr != nil {
		return "", fmt.Errorf("%s server: %w", t.Name(), srvErr)
	}
	return cliOut.String(), nil
}

// FreePort returns a TCP port free on every address: the perftest server
// listens on all of them (perftest's -p), and a port free on the server's
// address alone may be the source port of a connection on another (the
// TCP comparison's many connections from the client's address, still
// closing from the run before), where the server would fail with
// "address already in use". It looks in the server's namespace ns.
func FreePort(ns *netns.NS) (int, error) {
	var ln net.Listener
	err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", ":0")
		return err
	})
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// LastColumn returns field col of the last table row of a perftest report.
func LastColumn(out string, col int) (float64, error) {
	lines := bytes.Split([]byte(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		f := bytes.Fields(lines[i])
		if len(f) > col && len(f[0]) > 0 && f[0][0] >= '0' && f[0][0] <= '9' {
			return strconv.ParseFloat(string(f[col]), 64)
		}
	}
	return 0, fmt.Errorf("no result row in:\n%s", out)
}

// printCounters prints the devices' non-zero counters, by name.
func printCounters(out io.Writer, devs ...*verbs.Device) {
	for _, d := range devs {
		c := d.Counters()
		names := make([]string, 0, len(c))
		for k, v := range c {
			if v != 0 {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		fmt.Fprintf(out, " counters of %v:", d.Addr().Addr())
		for _, k := range names {
			fmt.Fprintf(out, " %s=%d", k, c[k])
		}
		fmt.Fprintln(out)
	}
}
