package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/syncbuf"
)

// Targets measures issue 8's targets between two processes, as a user
// runs the tools: goroce's ends are perftest tools, each in its own
// process (ib_write_bw and ib_write_lat, on one P and polling as the
// commands run), and TCP's are two Go processes moving the same bytes
// over one stream, or ping-ponging the same messages: once with reads
// that block, as Go's do (the target's reference), and once with reads
// that spin, as goroce's busy-poll mode does (printed beside it, no
// target of its own); and two bare processes ping-pong goroce's own
// datagram over UDP (End's udp-ends), the kernel's floor under goroce's
// latency, which tells goroce's own part. Each round runs
// every measurement once, goroce and TCP alternating which goes first;
// the summary gives each figure's median and range, each ratio taken
// within its round, and the distance of each median to its target.
//
// TargetsConfig.Command starts the processes; their CPU time (user and
// system, both ends) gives the CPU per GB.
func Targets(cfg TargetsConfig, out io.Writer) ([]*TargetRound, error) {
	cfg.defaults()
	if cfg.Command == nil {
		return nil, errors.New("targets: no Command to start the ends with")
	}
	r := &targetRun{cfg: cfg, tcpEnv: endEnv(false)}
	r.goroceEnv = endEnv(cfg.SameHost)
	path := "UDP"
	if cfg.SameHost {
		path = "the same-host path (GOROCE_SAMEHOST=1)"
	}
	fmt.Fprintf(out, "goroce bench -targets: issue 8's targets between two processes, goroce over %s (%v, %v) against TCP between two Go processes, %s, %s\n",
		path, cfg.Server, cfg.Client, cfg.Network, plural(cfg.Rounds, "round"))
	var rounds []*TargetRound
	for i := range cfg.Rounds {
		t, err := r.round(i)
		if err != nil {
			return rounds, fmt.Errorf("round %d: %w", i+1, err)
		}
		rounds = append(rounds, t)
		fmt.Fprintf(out, " round %d of %d: %s\n", i+1, cfg.Rounds, t.line(cfg))
	}
	PrintTargets(out, cfg, rounds)
	return rounds, nil
}

// TargetsConfig says how Targets measures.
type TargetsConfig struct {
	// Command returns the command that runs one end, the server's if
	// server, with End's arguments: cmd/goroce runs itself as `goroce
	// bench-end ARGS...`, inside the end's namespace with -veth.
	// Targets sets its environment, output and error.
	Command func(server bool, args ...string) *exec.Cmd
	// Network says what joins the two ends, for the report: "loopback"
	// by default. Veth says it is a veth pair between two namespaces,
	// where the bandwidth target is 1.3× TCP instead of 1.2×.
	Network string
	Veth    bool

	Rounds         int        // 0 means 1
	Server, Client netip.Addr // zero: 127.0.0.1 and 127.0.0.2
	// SameHost runs goroce's ends over the same-host path
	// (GOROCE_SAMEHOST=1); otherwise the variable is taken out of their
	// environment.
	SameHost bool
	// Size is the bandwidth tests' message size (0: 65536); Iters how
	// many messages each bandwidth test moves, split over the QPs (0:
	// 40960, 2.5 GiB of 64 KiB messages).
	Size, Iters int
	RateIters   int   // 64-byte messages of the message rate test; 0: 1,000,000
	LatIters    int   // ping-pongs of the latency tests; 0: 20000
	QPs         []int // QP counts measured against one QP; nil: 16, 256, 1024
	// Timeout bounds each process pair; 0 means 3 minutes.
	Timeout time.Duration
	// LineProbe measures a cache line's round trip between two CPUs
	// before and after each round (nil: 50 ms of lineRoundTrip; it returns
	// 0 where it cannot tell).
	LineProbe func() time.Duration
}

func (c *TargetsConfig) defaults() {
	if c.Rounds < 1 {
		c.Rounds = 1
	}
	if !c.Server.IsValid() {
		c.Server, c.Client = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	}
	if c.Size == 0 {
		c.Size = 65536
	}
	if c.Iters == 0 {
		c.Iters = 40960
	}
	if c.RateIters == 0 {
		c.RateIters = 1_000_000
	}
	if c.LatIters == 0 {
		c.LatIters = 20000
	}
	if c.QPs == nil {
		c.QPs = []int{16, 256, 1024}
	}
	if c.Timeout == 0 {
		c.Timeout = 3 * time.Minute
	}
	if c.Network == "" {
		c.Network = "loopback"
	}
	if c.LineProbe == nil {
		c.LineProbe = func() time.Duration { return lineRoundTrip(50 * time.Millisecond) }
	}
}

// TargetRound holds one round's figures.
type TargetRound struct {
	BW, TCPBW             float64   // MiB/s, one QP against one TCP stream
	CPUPerGB, TCPCPUPerGB float64   // CPU seconds of both processes per GB moved
	Lat, TCPLat           float64   // t_typical of 2-byte messages, µs one way
	TCPSpinLat            float64   // the same over TCP with readers that spin (spinningReads)
	FloorLat              float64   // the same datagrams as goroce's between two bare processes over UDP (internal/udpping); 0: not measured
	Rate                  float64   // 64-byte messages, millions per second
	QPBW                  []float64 // MiB/s at each of TargetsConfig.QPs
	QPRef                 []float64 // MiB/s of one QP, run right before or after each QPBW's
	// LineRT is a cache line's round trip between the two CPUs in ns,
	// before and after the round (TargetsConfig.LineProbe; 0: unknown).
	LineRT [2]float64
}

// A round whose cache-line round trip took farLine times the run's
// quickest or more and farLineGapNs more than it, or farLineNs or more,
// is named by PrintTargets as run with the vCPUs far apart (the
// twenty-fourth round's machine: 80–125 ns near, 360–660 far; CPUs of one
// socket take well under 300 ns on today's machines). The gap keeps one
// quick reading from making ordinary ones far: a sitting of the
// twenty-seventh round read 59 ns once and 95–139 ns otherwise.
const (
	farLine      = 2
	farLineGapNs = 100
	farLineNs    = 300
)

// lineMax is the longer of t's two cache-line round trips.
func (t *TargetRound) lineMax() float64 { return max(t.LineRT[0], t.LineRT[1]) }

// line is the round's figures on one line.
func (t *TargetRound) line(cfg TargetsConfig) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d B %.0f MiB/s, TCP %.0f (%.2fx); CPU s/GB %.2f, TCP %.2f; 2 B %.2f us, TCP %.2f, spinning %.2f",
		cfg.Size, t.BW, t.TCPBW, t.BW/t.TCPBW, t.CPUPerGB, t.TCPCPUPerGB, t.Lat, t.TCPLat, t.TCPSpinLat)
	if t.FloorLat > 0 {
		fmt.Fprintf(&b, ", UDP floor %.2f", t.FloorLat)
	}
	fmt.Fprintf(&b, "; 64 B %.2f M/s", t.Rate)
	for i, q := range cfg.QPs {
		fmt.Fprintf(&b, "; %d QPs %.2fx", q, t.QPBW[i]/t.QPRef[i])
	}
	if t.lineMax() > 0 {
		fmt.Fprintf(&b, "; cache line between the CPUs %.0f/%.0f ns", t.LineRT[0], t.LineRT[1])
	}
	return b.String()
}

// A target is one of issue 8's goals: a figure's median at least or at
// most bound.
type target struct {
	goal    string // as the table shows it
	atLeast bool
	bound   float64
}

// Issue 8's targets.
var (
	targetBW   = target{"≥ 1.2x TCP", true, 1.2}
	targetVeth = target{"≥ 1.3x TCP", true, 1.3}
	targetCPU  = target{"≤ 1x TCP", false, 1}
	targetLat  = target{"≤ 0.5x TCP", false, 0.5}
	targetRate = target{"≥ 1.5 M/s", true, 1.5}
	targetQPs  = target{"≥ 0.9x 1 QP", true, 0.9}
)

// verdict says whether v meets the target, or by what factor it falls
// short.
func (t target) verdict(v float64) string {
	switch {
	case v <= 0 || math.IsNaN(v) || math.IsInf(v, 0):
		return "not measured"
	case t.atLeast && v >= t.bound, !t.atLeast && v <= t.bound:
		return "met"
	}
	f := v / t.bound
	if t.atLeast {
		f = t.bound / v
	}
	if f < 1.005 { // would print as 1.00x
		return fmt.Sprintf("%.3fx short", f)
	}
	return fmt.Sprintf("%.2fx short", f)
}

// PrintTargets prints the summary of rounds: each target's figures, the
// medians (and ranges) of goroce's, TCP's and their ratio, and how far
// the median is from the target. When some rounds ran with the host's two
// vCPUs far apart (farRounds) and at least two with them close, the same
// table follows for the close rounds alone: the figures a host that keeps
// its vCPUs together gives, beside those of the whole run.
func PrintTargets(out io.Writer, cfg TargetsConfig, rounds []*TargetRound) {
	if len(rounds) == 0 {
		return
	}
	cfg.defaults()
	if len(rounds) == 1 {
		fmt.Fprint(out, "\n 1 round\n")
	} else {
		fmt.Fprintf(out, "\n %d rounds: medians (min–max); each ratio is taken within its round\n", len(rounds))
	}
	printTable(out, cfg, rounds)
	fmt.Fprint(out, " (each QP row's ratio is against a run of one QP right before or after it; the other targets, zero allocations per packet, an idle QP's memory and 100,000 QPs, are tests: docs/PERFORMANCE.md)\n")
	printLines(out, rounds)
	far := farRounds(rounds)
	if len(far) == 0 || len(rounds)-len(far) < 2 {
		return
	}
	var near []*TargetRound
	var which []string
	for i, r := range rounds {
		if !slices.Contains(far, i) {
			near = append(near, r)
			which = append(which, strconv.Itoa(i+1))
		}
	}
	fmt.Fprintf(out, "\n the %d rounds with the two vCPUs close (%s): medians (min–max)\n", len(near), strings.Join(which, ", "))
	printTable(out, cfg, near)
}

// printTable prints the summary table of rounds.
func printTable(out io.Writer, cfg TargetsConfig, rounds []*TargetRound) {
	const row = " %-38s %-12s %-24s %-24s %-20s %s\n"
	fmt.Fprintf(out, row, "target", "goal", "goroce", "TCP", "ratio", "verdict")
	type fig = func(*TargetRound) float64
	cell := func(f fig, format string) string {
		if f == nil {
			return ""
		}
		return Spread(rounds, f, format)
	}
	// line prints a target's row: goroce's figure g, TCP's (nil: none),
	// their ratio or one against something else (nil: none), and the
	// verdict on the median of the ratio, or of g where there is none.
	line := func(name string, t target, format string, g, tcp, ratio fig) {
		judged := g
		if ratio != nil {
			judged = ratio
		}
		fmt.Fprintf(out, row, name, t.goal, cell(g, format), cell(tcp, format), cell(ratio, "%.2fx"), t.verdict(MedianOf(rounds, judged)))
	}
	// vsTCP prints a row of goroce's figure g against TCP's.
	vsTCP := func(name string, t target, format string, g, tcp fig) {
		line(name, t, format, g, tcp, func(r *TargetRound) float64 { return g(r) / tcp(r) })
	}
	bw := func(r *TargetRound) float64 { return r.BW }
	bwTarget := targetBW
	if cfg.Veth {
		bwTarget = targetVeth
	}
	vsTCP(fmt.Sprintf("ib_write_bw %d B, 1 QP [MiB/s]", cfg.Size), bwTarget, "%.0f", bw, func(r *TargetRound) float64 { return r.TCPBW })
	vsTCP("CPU seconds per GB, both processes", targetCPU, "%.2f", func(r *TargetRound) float64 { return r.CPUPerGB }, func(r *TargetRound) float64 { return r.TCPCPUPerGB })
	lat, tcpLat := func(r *TargetRound) float64 { return r.Lat }, func(r *TargetRound) float64 { return r.TCPLat }
	vsTCP("ib_write_lat 2 B t_typical [usec]", targetLat, "%.2f", lat, tcpLat)
	// goroce's busy-poll latency against TCP's whose readers spin too: no
	// target of the issue's, the like-for-like reference beside the one
	// above, whose TCP readers block and wait to be woken.
	spin := func(r *TargetRound) float64 { return r.TCPSpinLat }
	fmt.Fprintf(out, row, "  the same, TCP's readers spinning", "", cell(lat, "%.2f"), cell(spin, "%.2f"),
		cell(func(r *TargetRound) float64 { return lat(r) / spin(r) }, "%.2fx"), "(reference)")
	if f := MedianOf(rounds, tcpLat) / MedianOf(rounds, spin); f > 2 {
		fmt.Fprintf(out, "   (TCP's blocking ping-pong took %.1fx its spinning one: waking the other process costs most of it on this host, so the latency verdict above says more about the host than about goroce)\n", f)
	}
	// The kernel's floor over UDP: goroce's datagrams between two bare
	// processes; goroce's figure less the floor is its own part.
	if floor := func(r *TargetRound) float64 { return r.FloorLat }; MedianOf(rounds, floor) > 0 {
		fmt.Fprintf(out, row, "  the same, bare UDP (kernel's floor)", "", cell(lat, "%.2f"), cell(floor, "%.2f"),
			cell(func(r *TargetRound) float64 { return lat(r) / floor(r) }, "%.2fx"), "(reference)")
		if own := MedianOf(rounds, func(r *TargetRound) float64 { return lat(r) - floor(r) }); own > 0 {
			fmt.Fprintf(out, "   (goroce's own part, its time less the floor: %.2f us one way)\n", own)
		}
	}
	line("ib_write_bw 64 B [M msg/s]", targetRate, "%.2f", func(r *TargetRound) float64 { return r.Rate }, nil, nil)
	for i, q := range cfg.QPs {
		g := func(r *TargetRound) float64 { return r.QPBW[i] }
		line(fmt.Sprintf("ib_write_bw %d B, %d QPs [MiB/s]", cfg.Size, q), targetQPs, "%.0f", g, nil, func(r *TargetRound) float64 { return g(r) / r.QPRef[i] })
	}
}

// farRounds returns the indexes of the rounds whose cache-line round trip
// (TargetRound.LineRT) took farLine times the run's quickest and
// farLineGapNs more, or farLineNs or more, before or after: the host had
// put the vCPUs far apart for some of the round, which slows every
// transfer between the two processes.
func farRounds(rounds []*TargetRound) []int {
	lo := math.Inf(1)
	for _, r := range rounds {
		for _, v := range r.LineRT {
			if v > 0 {
				lo = min(lo, v)
			}
		}
	}
	var far []int
	for i, r := range rounds {
		if m := r.lineMax(); m > 0 && (m >= farLine*lo && m-lo >= farLineGapNs || m >= farLineNs) {
			far = append(far, i)
		}
	}
	return far
}

// printLines notes the cache line's round trips between the two CPUs
// (TargetRound.LineRT) and names the rounds farRounds finds.
func printLines(out io.Writer, rounds []*TargetRound) {
	lo, hi := math.Inf(1), 0.0
	for _, r := range rounds {
		for _, v := range r.LineRT {
			if v > 0 {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return
	}
	var far []string
	for _, i := range farRounds(rounds) {
		far = append(far, strconv.Itoa(i+1))
	}
	fmt.Fprintf(out, " (a cache line went between the two CPUs and back in %.0f–%.0f ns around the rounds", lo, hi)
	if len(far) > 0 {
		which := "round " + far[0]
		if len(far) > 1 {
			which = "rounds " + strings.Join(far, ", ")
		}
		fmt.Fprintf(out, "; in %s it took %dx the quickest and %d ns more, or %d ns or more: the host had put the two vCPUs far apart, which slows every transfer between the processes, the same-host path's most", which, farLine, farLineGapNs, farLineNs)
	}
	fmt.Fprint(out, ")\n")
}

// plural is "1 round", "2 rounds".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// targetRun is one Targets call's state.
type targetRun struct {
	cfg               TargetsConfig
	goroceEnv, tcpEnv []string
}

// endEnv is the environment of an end's process: this one's, with
// GOROCE_SAMEHOST=1 for goroce's ends over the same-host path and without
// the variable otherwise.
func endEnv(sameHost bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOROCE_SAMEHOST=") {
			env = append(env, kv)
		}
	}
	if sameHost {
		env = append(env, "GOROCE_SAMEHOST=1")
	}
	return env
}

// round runs every measurement once; in odd rounds TCP goes first.
func (r *targetRun) round(i int) (*TargetRound, error) {
	cfg := r.cfg
	t := &TargetRound{}
	t.LineRT[0] = float64(cfg.LineProbe().Nanoseconds())
	t, err := r.measure(i, t)
	if err == nil {
		t.LineRT[1] = float64(cfg.LineProbe().Nanoseconds())
	}
	return t, err
}

// measure runs round i's measurements into t.
func (r *targetRun) measure(i int, t *TargetRound) (*TargetRound, error) {
	cfg := r.cfg
	both := func(goroce, tcp func() error) error {
		if i%2 == 1 {
			goroce, tcp = tcp, goroce
		}
		if err := goroce(); err != nil {
			return err
		}
		return tcp()
	}
	size, iters := strconv.Itoa(cfg.Size), strconv.Itoa(cfg.Iters)
	bytes := float64(cfg.Size) * float64(cfg.Iters)
	err := both(func() error {
		out, cpu, err := r.tool("ib_write_bw", "-s", size, "-n", iters)
		if err == nil {
			t.BW, err = LastColumn(out, 3)
			t.CPUPerGB = cpu.Seconds() / (bytes / 1e9)
		}
		return err
	}, func() error {
		out, cpu, err := r.tcp([]string{"tcp-sink", cfg.Server.String()}, "tcp-source", size, strconv.FormatFloat(bytes, 'f', 0, 64))
		if err == nil {
			t.TCPBW, err = endFigure(out, "MiB/s")
			t.TCPCPUPerGB = cpu.Seconds() / (bytes / 1e9)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	lat := strconv.Itoa(cfg.LatIters)
	err = both(func() error {
		out, _, err := r.tool("ib_write_lat", "-s", "2", "-n", lat)
		if err == nil {
			t.Lat, err = LastColumn(out, 4)
		}
		return err
	}, func() error {
		// TCP's ping-pong with blocking reads (the target's), then with
		// spinning ones (the reference).
		for _, p := range []struct {
			end string
			lat *float64
		}{{"tcp-", &t.TCPLat}, {"tcp-spin-", &t.TCPSpinLat}} {
			out, _, err := r.tcp([]string{p.end + "echo", cfg.Server.String(), "2"}, p.end+"ping", "2", lat)
			if err == nil {
				*p.lat, err = endFigure(out, "t_typical")
			}
			if err != nil {
				return err
			}
		}
		// Then the kernel's floor: goroce's datagram between two bare
		// processes, in the same place as the TCP ends.
		out, _, err := r.floor(lat)
		if err == nil {
			t.FloorLat, err = endFigure(out, "t_typical")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out, _, err := r.tool("ib_write_bw", "-s", "64", "-n", strconv.Itoa(cfg.RateIters))
	if err == nil {
		t.Rate, err = LastColumn(out, 4)
	}
	if err != nil {
		return nil, err
	}
	// Each QP count against a run of one QP next to it, which goes first
	// in every other round: the machine's speed drifts within seconds here
	// (1.5x and more), and the round's first run of one QP, the stream
	// target's, was taken up to ten seconds before the 1024 QPs' run.
	qps := func(q int) (float64, error) {
		out, _, err := r.tool("ib_write_bw", "-s", size, "-q", strconv.Itoa(q), "-n", strconv.Itoa(max(cfg.Iters/q, 1)))
		if err != nil {
			return 0, err
		}
		return LastColumn(out, 3)
	}
	for k, q := range cfg.QPs {
		var bw, ref float64
		one, many := func() (err error) { ref, err = qps(1); return err }, func() (err error) { bw, err = qps(q); return err }
		if (i+k)%2 == 1 {
			one, many = many, one
		}
		if err := one(); err != nil {
			return nil, err
		}
		if err := many(); err != nil {
			return nil, err
		}
		t.QPBW, t.QPRef = append(t.QPBW, bw), append(t.QPRef, ref)
	}
	return t, nil
}

// tool runs a perftest tool's server and client, each in its process, and
// returns the client's output and both processes' CPU time. The TCP port
// is picked free, and again if something took it before the server bound
// it.
func (r *targetRun) tool(name string, args ...string) (string, time.Duration, error) {
	for try := 0; ; try++ {
		port, err := FreePort(nil)
		if err != nil {
			return "", 0, err
		}
		common := append([]string{"perftest", name, "-p", strconv.Itoa(port)}, args...)
		srv := append(append([]string{}, common...), "-d", r.cfg.Server.String())
		out, cpu, err := r.pair(r.goroceEnv, srv, "Waiting for client", func(string) ([]string, error) {
			return append(append([]string{}, common...), "-d", r.cfg.Client.String(), r.cfg.Server.String()), nil
		})
		if err != nil && try < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("%s %q: %w", name, args, err)
		}
		return out, cpu, nil
	}
}

// tcp runs a TCP end's server and its client, whose arguments follow the
// client's address and the server's address and port, and returns the
// client's output and both processes' CPU time.
func (r *targetRun) tcp(srv []string, client string, args ...string) (string, time.Duration, error) {
	out, cpu, err := r.pair(r.tcpEnv, srv, "\n", func(srvOut string) ([]string, error) {
		server, err := r.serverPort(srvOut)
		return append([]string{client, r.cfg.Client.String(), server}, args...), err
	})
	if err != nil {
		return "", 0, fmt.Errorf("TCP %s: %w", client, err)
	}
	return out, cpu, nil
}

// floor runs End's UDP ends, n ping-pongs of goroce's datagram between
// two bare processes, in the TCP ends' environment and places.
func (r *targetRun) floor(n string) (string, time.Duration, error) {
	out, cpu, err := r.pair(r.tcpEnv, []string{"udp-echo", r.cfg.Server.String(), n}, "\n", func(srvOut string) ([]string, error) {
		server, err := r.serverPort(srvOut)
		return []string{"udp-ping", r.cfg.Client.String(), server, n}, err
	})
	if err != nil {
		return "", 0, fmt.Errorf("UDP floor: %w", err)
	}
	return out, cpu, nil
}

// serverPort returns the server's address with the port its end printed
// ("port N"), as the client end's argument.
func (r *targetRun) serverPort(srvOut string) (string, error) {
	var port uint16
	if _, err := fmt.Sscanf(srvOut, "port %d\n", &port); err != nil {
		return "", fmt.Errorf("the server end printed %q, want \"port N\"", srvOut)
	}
	return netip.AddrPortFrom(r.cfg.Server, port).String(), nil
}

// pair starts the server end, waits until its output holds ready, starts
// the client end with the arguments client makes of that output, and
// waits for both to exit 0. It returns the client's output and both
// processes' CPU time.
func (r *targetRun) pair(env, srvArgs []string, ready string, client func(srvOut string) ([]string, error)) (string, time.Duration, error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	s, err := r.start(true, env, srvArgs)
	if err != nil {
		return "", 0, err
	}
	defer s.kill()
	for !s.out.Contains(ready) {
		if s.exited() {
			return "", 0, fmt.Errorf("server exited before it was ready: %v: %s", s.err, s.errOut.String())
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("server not ready after %v", r.cfg.Timeout)
		}
		time.Sleep(time.Millisecond)
	}
	args, err := client(s.out.String())
	if err != nil {
		return "", 0, err
	}
	c, err := r.start(false, env, args)
	if err != nil {
		return "", 0, err
	}
	defer c.kill()
	for _, p := range []*endProc{c, s} {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			return "", 0, fmt.Errorf("not done after %v", r.cfg.Timeout)
		}
		if p.err != nil {
			return "", 0, fmt.Errorf("%q: %v: %s", p.cmd.Args, p.err, p.errOut.String())
		}
	}
	return c.out.String(), c.cpu() + s.cpu(), nil
}

// An endProc is a running end.
type endProc struct {
	cmd         *exec.Cmd
	out, errOut syncbuf.Buffer
	done        chan struct{} // closed when the process has exited and err is set
	err         error
}

// start starts an end, the server's if server, with env.
func (r *targetRun) start(server bool, env, args []string) (*endProc, error) {
	p := &endProc{cmd: r.cfg.Command(server, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *endProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process if it still runs, and waits for it.
func (p *endProc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// cpu is the process's user and system CPU time; it has exited.
func (p *endProc) cpu() time.Duration {
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// errNoFigure reports a TCP end's output without the figure looked for.
var errNoFigure = errors.New("no figure")

// endFigure returns the number after name in a TCP end's output
// ("MiB/s 1234.5").
func endFigure(out, name string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%w %q in %q", errNoFigure, name, out)
}
