// Package targets measures goroce's performance targets between two
// processes, as a user runs the tools, against TCP between two Go
// processes, and says of each how far it is; End runs the ends, each in
// a process of its own.
package targets

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/tools/perf/internal/cpus"
)

// Run measures the performance targets (docs/PERFORMANCE.md) between two
// processes, as a user runs the tools: goroce's ends are perftest tools, each in its own
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
// Config.Command starts the processes; their CPU time (user and
// system, both ends) gives the CPU per GB.
func Run(cfg Config, out io.Writer) ([]*Round, error) {
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
	fmt.Fprintf(out, "targets between two processes: goroce over %s (%v, %v) against TCP between two Go processes, %s, %s\n",
		path, cfg.Server, cfg.Client, cfg.Network, plural(cfg.Rounds, "round"))
	var rounds []*Round
	for i := range cfg.Rounds {
		t, err := r.round(i)
		if err != nil {
			return rounds, fmt.Errorf("round %d: %w", i+1, err)
		}
		rounds = append(rounds, t)
		fmt.Fprintf(out, " round %d of %d: %s\n", i+1, cfg.Rounds, t.line(cfg))
	}
	Print(out, cfg, rounds)
	return rounds, nil
}

// Config says how Run measures.
type Config struct {
	// Command returns the command that runs one end, the server's if
	// server, with End's arguments: tools/perf runs itself as `perf end
	// ARGS...`, inside the end's namespace with -veth. Run sets its
	// environment, output and error.
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
	// before and after each round (nil: 50 ms of cpus.LineRoundTrip; it
	// returns 0 where it cannot tell).
	LineProbe func() time.Duration
}

func (c *Config) defaults() {
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
		c.LineProbe = func() time.Duration { return cpus.LineRoundTrip(50 * time.Millisecond) }
	}
}

// Round holds one round's figures.
type Round struct {
	BW, TCPBW             float64   // MiB/s, one QP against one TCP stream
	CPUPerGB, TCPCPUPerGB float64   // CPU seconds of both processes per GB moved
	Lat, TCPLat           float64   // t_typical of 2-byte messages, µs one way
	TCPSpinLat            float64   // the same over TCP with readers that spin (spinningReads)
	FloorLat              float64   // the same datagrams as goroce's between two bare processes over UDP (internal/udpping); 0: not measured
	Rate                  float64   // 64-byte messages, millions per second
	QPBW                  []float64 // MiB/s at each of Config.QPs
	QPRef                 []float64 // MiB/s of one QP, run right before or after each QPBW's
	// LineRT is a cache line's round trip between the two CPUs in ns,
	// before and after the round (Config.LineProbe; 0: unknown).
	LineRT [2]float64
}

// line is the round's figures on one line.
func (t *Round) line(cfg Config) string {
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

// targetRun is one Run call's state.
type targetRun struct {
	cfg               Config
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
func (r *targetRun) round(i int) (*Round, error) {
	cfg := r.cfg
	t := &Round{}
	t.LineRT[0] = float64(cfg.LineProbe().Nanoseconds())
	t, err := r.measure(i, t)
	if err == nil {
		t.LineRT[1] = float64(cfg.LineProbe().Nanoseconds())
	}
	return t, err
}

// measure runs round i's measurements into t.
func (r *targetRun) measure(i int, t *Round) (*Round, error) {
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
			t.BW, err = bench.LastColumn(out, 3)
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
			t.Lat, err = bench.LastColumn(out, 4)
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
		t.Rate, err = bench.LastColumn(out, 4)
	}
	if err != nil {
		return nil, err
	}
	// Each QP count against a run of one QP next to it, which goes first
	// in every other round: a shared machine's speed drifts within
	// seconds, and the round's first run of one QP, the stream target's,
	// runs many seconds before the largest count's.
	qps := func(q int) (float64, error) {
		out, _, err := r.tool("ib_write_bw", "-s", size, "-q", strconv.Itoa(q), "-n", strconv.Itoa(max(cfg.Iters/q, 1)))
		if err != nil {
			return 0, err
		}
		return bench.LastColumn(out, 3)
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
