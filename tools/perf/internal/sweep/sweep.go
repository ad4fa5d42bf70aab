// Package sweep measures goroce against TCP over a range: bandwidth and
// latency against message size, and aggregate bandwidth against QP count,
// each point goroce then TCP in the same run, both ends in this process;
// it prints the tables, reads them back and plots them.
package sweep

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/perftest"
	"github.com/goroce/goroce/tools/perf/internal/cpus"
)

// Config says what a sweep covers.
type Config struct {
	Verb           perftest.Verb
	MinSize        int // bandwidth and latency sizes, powers of two: 2 … 8 MiB by default
	MaxSize        int
	MaxLatSize     int   // latency sizes stop here; default 1 MiB
	QPs            []int // QP counts at QPSize; default 1, 2, 4 … 1024
	QPSize         int   // default 65536
	Bytes          int64 // bytes each bandwidth point moves (per side); default 256 MiB
	LatIters       int   // default 200
	Server, Client netip.Addr
	SameHost       bool // open the devices with the same-host path (verbs.Config.SameHost)
	Procs          int  // GOMAXPROCS for goroce's bandwidth points, as bench.Config.Procs
	Poll           bool // goroce's bandwidth points busy-poll, as bench.Config.Poll
	// ServerNS and ClientNS are the ends' network namespaces, as
	// bench.Config's; Network says what joins them, for the tables and the
	// plot: "loopback" by default.
	ServerNS, ClientNS *netns.NS
	Network            string
	// Rounds is how many times each point is measured, goroce then TCP
	// each time; the tables show the medians (1 by default).
	Rounds int
	// LineProbe measures a cache line's round trip between two CPUs,
	// printed before each section and after each of its rounds (nil: 50
	// ms of cpus.LineRoundTrip; 0 prints nothing): whether the host had
	// the two vCPUs close or far apart while the section ran.
	LineProbe func() time.Duration
}

// Point is one measurement of a sweep, goroce and TCP side by side.
type Point struct {
	X           int     // message size or QP count
	Goroce, TCP float64 // MiB/s, or µs for latency
}

// Result holds the three series of a sweep.
type Result struct {
	BWBySize, LatBySize, BWByQPs []Point
	SameHost                     bool   // goroce ran over the same-host path
	Network                      string // what joined the two ends: "loopback", or as Config.Network said
	Rounds                       int    // measurements per point, whose medians the series hold
}

// sameHostHeader heads the tables of a sweep over the same-host path.
const sameHostHeader = "Path: goroce over the same-host path (shared memory, GOROCE_SAMEHOST=1); TCP as always"

// lineHeader starts the lines that give a cache line's round trip
// between the two CPUs (Config.LineProbe).
const lineHeader = "Cache line between the two CPUs and back: "

// networkHeader heads the tables of every sweep, naming what joined the
// ends.
const networkHeader = "Network: "

// roundsHeader heads the tables of a sweep whose points are medians of
// several rounds.
const roundsHeader = "Rounds: "

func (c *Config) defaults() {
	if c.MinSize == 0 {
		c.MinSize = 2
	}
	if c.MaxSize == 0 {
		c.MaxSize = 8 << 20
	}
	if c.MaxLatSize == 0 {
		c.MaxLatSize = 1 << 20
	}
	if c.QPSize == 0 {
		c.QPSize = 65536
	}
	if c.QPs == nil {
		for n := 1; n <= 1024; n *= 2 {
			c.QPs = append(c.QPs, n)
		}
	}
	if c.Bytes == 0 {
		c.Bytes = 256 << 20
	}
	if c.LatIters == 0 {
		c.LatIters = 200
	}
	if !c.Server.IsValid() {
		c.Server, c.Client = netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	}
	if c.Network == "" {
		c.Network = "loopback"
	}
	if c.LineProbe == nil {
		c.LineProbe = func() time.Duration { return cpus.LineRoundTrip(50 * time.Millisecond) }
	}
	if c.Rounds == 0 {
		c.Rounds = 1
	}
}

// iters is the iteration count that moves about total bytes in messages
// of size bytes on qps QPs, within perftest's bounds.
func iters(total int64, size, qps int) int {
	n := total / int64(size) / int64(qps)
	return int(min(max(n, 5), 20000)) // above 20000 perftest drops the peak
}

// Run measures bandwidth and latency against message size, and
// bandwidth against QP count, each point goroce then TCP in the same run,
// and prints each section's table when its points are measured.
func Run(cfg Config, out io.Writer) (*Result, error) {
	cfg.defaults()
	e, err := bench.OpenEnds(cfg.Server, cfg.Client, cfg.ServerNS, cfg.ClientNS, cfg.SameHost)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	tcfg := bench.Config{Server: cfg.Server, Client: cfg.Client, ServerNS: cfg.ServerNS, ClientNS: cfg.ClientNS, QPs: 1, LatIters: cfg.LatIters}
	bw := perftest.Test{Verb: cfg.Verb, Kind: perftest.BW}
	res := &Result{SameHost: cfg.SameHost, Network: cfg.Network, Rounds: cfg.Rounds}
	fmt.Fprintf(out, " %s%s\n", networkHeader, cfg.Network)
	if cfg.Rounds > 1 {
		fmt.Fprintf(out, " %s%d per point, goroce then TCP each time, each round over all of a section's points; medians, the ratio the median of the rounds' ratios\n", roundsHeader, cfg.Rounds)
	}
	if cfg.SameHost {
		fmt.Fprintf(out, " %s\n\n", sameHostHeader)
	}

	// bwBoth measures goroce's bandwidth with n size-byte messages on qps
	// QPs, then TCP's over as many connections.
	bwBoth := func(size, n, qps int) func() (g, t float64, err error) {
		return func() (g, t float64, err error) {
			if g, err = bwPoint(bw, size, n, qps, cfg.Procs, cfg.Poll, e); err != nil {
				return 0, 0, err
			}
			tc := tcfg
			tc.QPs = qps
			t, _, err = bench.TCPBandwidth(tc, size, int64(size)*int64(n))
			return g, t, err
		}
	}

	var sizes []sweepPoint
	for size := cfg.MinSize; size <= cfg.MaxSize; size *= 2 {
		n := iters(cfg.Bytes, size, 1)
		sizes = append(sizes, sweepPoint{size, n, bwBoth(size, n, 1)})
	}
	err = cfg.section(out, "the bandwidth points", &res.BWBySize, sizes,
		fmt.Sprintf("Bandwidth against message size (1 QP), goroce %s vs one TCP stream, same run", bw.Name()),
		"#bytes", "#iters", "goroce[MiB/s]", "TCP[MiB/s]")
	if err != nil {
		return nil, err
	}

	lat := perftest.Test{Verb: perftest.Write, Kind: perftest.Lat}
	var lats []sweepPoint
	for size := cfg.MinSize; size <= cfg.MaxLatSize; size *= 2 {
		args := []string{"-n", strconv.Itoa(cfg.LatIters), "-s", strconv.Itoa(size)}
		lats = append(lats, sweepPoint{size, cfg.LatIters, func() (g, t float64, err error) {
			o, err := bench.Pair(lat, args, false, e, io.Discard)
			if err != nil {
				return 0, 0, err
			}
			if g, err = bench.LastColumn(o, 4); err != nil {
				return 0, 0, err
			}
			t, err = bench.TCPLatency(tcfg, size)
			return g, t, err
		}})
	}
	fmt.Fprintln(out)
	err = cfg.section(out, "the latency points", &res.LatBySize, lats,
		fmt.Sprintf("Latency against message size, goroce %s vs TCP ping-pong (t_typical, one way), same run", lat.Name()),
		"#bytes", "#iters", "goroce[usec]", "TCP[usec]")
	if err != nil {
		return nil, err
	}

	var qps []sweepPoint
	for _, q := range cfg.QPs {
		n := iters(cfg.Bytes, cfg.QPSize, q)
		qps = append(qps, sweepPoint{q, n, bwBoth(cfg.QPSize, n, q)})
	}
	fmt.Fprintln(out)
	err = cfg.section(out, "the QP points", &res.BWByQPs, qps,
		fmt.Sprintf("Aggregate bandwidth against QP count (%d-byte messages), goroce vs as many TCP streams, same run", cfg.QPSize),
		"#QPs", "#iters/QP", "goroce[MiB/s]", "TCP[MiB/s]")
	if err != nil {
		return nil, err
	}
	return res, nil
}

// sweepPoint is one point of a section: its size or QP count, its
// iterations, and the measurement of a round (goroce's figure, then
// TCP's).
type sweepPoint struct {
	x, iters int
	measure  func() (g, t float64, err error)
}

// section measures points in cfg.Rounds rounds, each round over all of
// them, and prints its table: a header line, the columns (x, iters,
// goroce, TCP, ratio), and a row per point with the medians of goroce's
// figures, of TCP's and of the rounds' ratios, which it also appends to
// series. Every other round goes over the points backwards. A host whose
// speed changes for a stretch of seconds, as a shared virtual machine's
// does when the host moves its two vCPUs apart, then slows one round of
// every point rather than every round of the points it happens to fall
// on; a point's median
// moves only when the stretch covers most of the section. The cache
// line's round trip between the two CPUs (LineProbe) is printed as it
// was before the first round and after each, named by what, for the
// reader to see whether a section ran while the host had the vCPUs apart.
func (cfg *Config) section(out io.Writer, what string, series *[]Point, points []sweepPoint, header, xName, itersName, gName, tName string) error {
	probes := []time.Duration{cfg.LineProbe()}
	figures := make([][3][]float64, len(points)) // per point: goroce's, TCP's, the ratios
	for r := range cfg.Rounds {
		for k := range points {
			i := k
			if r%2 == 1 {
				i = len(points) - 1 - k
			}
			g, t, err := points[i].measure()
			if err != nil {
				return err
			}
			f := &figures[i]
			f[0], f[1], f[2] = append(f[0], g), append(f[1], t), append(f[2], g/t)
		}
		probes = append(probes, cfg.LineProbe())
	}
	if probes[0] > 0 {
		ns := make([]string, len(probes)-1)
		for i, p := range probes[1:] {
			ns[i] = strconv.FormatInt(p.Nanoseconds(), 10)
		}
		fmt.Fprintf(out, " %s%d ns before %s, %s ns after each round\n", lineHeader, probes[0].Nanoseconds(), what, strings.Join(ns, ", "))
	}
	fmt.Fprintf(out, " %s\n", header)
	fmt.Fprintf(out, " %-10s %-10s %16s %16s %10s\n", xName, itersName, gName, tName, "ratio")
	for i, p := range points {
		var m [3]float64
		for j, v := range figures[i] {
			m[j] = bench.Median(v)
		}
		*series = append(*series, Point{p.x, m[0], m[1]})
		fmt.Fprintf(out, " %-10d %-10d %16.2f %16.2f %9.2fx\n", p.x, p.iters, m[0], m[1], m[2])
	}
	return nil
}

// bwPoint runs one perftest bandwidth test and returns its average.
func bwPoint(t perftest.Test, size, n, qps, procs int, poll bool, e *bench.Ends) (float64, error) {
	args := []string{"-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-q", strconv.Itoa(qps)}
	var o string
	var err error
	bench.WithProcs(procs, func() { o, err = bench.Pair(t, args, poll, e, io.Discard) })
	if err != nil {
		return 0, err
	}
	return bench.LastColumn(o, 3)
}

// finite reports whether v is neither infinite nor NaN.
func finite(v float64) bool { return !math.IsInf(v, 0) && !math.IsNaN(v) }

// Parse reads back the tables Run prints (its three sections, each
// a header line, a column line and rows of size or QP count, iterations,
// goroce, TCP and ratio), so that a saved sweep can be plotted again.
func Parse(r io.Reader) (*Result, error) {
	res := &Result{Network: "loopback", Rounds: 1}
	var cur *[]Point
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(text, "Bandwidth against message size"):
			cur = &res.BWBySize
			continue
		case strings.HasPrefix(text, "Latency against message size"):
			cur = &res.LatBySize
			continue
		case strings.HasPrefix(text, "Aggregate bandwidth against QP count"):
			cur = &res.BWByQPs
			continue
		case text == sameHostHeader:
			res.SameHost = true
			continue
		case strings.HasPrefix(text, networkHeader):
			res.Network = strings.TrimPrefix(text, networkHeader)
			continue
		case strings.HasPrefix(text, roundsHeader):
			count, _, _ := strings.Cut(strings.TrimPrefix(text, roundsHeader), " ")
			n, err := strconv.Atoi(count)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("sweep table line %d: %q: want a round count of 1 or more", line, text)
			}
			res.Rounds = n
			continue
		case text == "" || strings.HasPrefix(text, "#") || strings.HasPrefix(text, "plot: ") || strings.HasPrefix(text, lineHeader):
			continue
		}
		f := strings.Fields(text)
		if cur == nil || len(f) != 5 {
			return nil, fmt.Errorf("sweep table line %d: %q is not a row of a section", line, text)
		}
		x, err1 := strconv.Atoi(f[0])
		g, err2 := strconv.ParseFloat(f[2], 64)
		t, err3 := strconv.ParseFloat(f[3], 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("sweep table line %d: %w", line, err)
		}
		if x <= 0 {
			return nil, fmt.Errorf("sweep table line %d: size or QP count %d is not positive", line, x)
		}
		if !finite(g) || !finite(t) || g < 0 || t < 0 {
			return nil, fmt.Errorf("sweep table line %d: figures %s and %s must be finite and not negative", line, f[2], f[3])
		}
		*cur = append(*cur, Point{x, g, t})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(res.BWBySize)+len(res.LatBySize)+len(res.BWByQPs) == 0 {
		return nil, errors.New("no sweep table found")
	}
	return res, nil
}
