package targets

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/bench"
)

// A round whose cache-line round trip took farLine times the run's
// quickest or more and farLineGapNs more than it, or farLineNs or more,
// is named by Print as run with the vCPUs far apart. CPUs of one socket
// take well under farLineNs on today's machines; a host that moves two
// vCPUs apart multiplies it several times. The gap keeps one unusually
// quick reading from making the ordinary ones far
// (docs/design/tuning.md#far-vcpus).
const (
	farLine      = 2
	farLineGapNs = 100
	farLineNs    = 300
)

// lineMax is the longer of t's two cache-line round trips.
func (t *Round) lineMax() float64 { return max(t.LineRT[0], t.LineRT[1]) }

// A target is one of goroce's performance goals (docs/PERFORMANCE.md): a
// figure's median at least or at most bound.
type target struct {
	goal    string // as the table shows it
	atLeast bool
	bound   float64
}

// The targets: 64 KiB WRITEs at 1.2x one TCP stream's bandwidth (1.3x
// across a veth pair), no more CPU per byte than TCP, a 2-byte WRITE in
// half TCP's one-way time, 1.5 million 64-byte messages a second, and as
// much with many QPs as with one (0.9x).
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

// Print prints the summary of rounds: each target's figures, the
// medians (and ranges) of goroce's, TCP's and their ratio, and how far
// the median is from the target. When some rounds ran with the host's two
// vCPUs far apart (farRounds) and at least two with them close, the same
// table follows for the close rounds alone: the figures a host that keeps
// its vCPUs together gives, beside those of the whole run.
func Print(out io.Writer, cfg Config, rounds []*Round) {
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
	var near []*Round
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
func printTable(out io.Writer, cfg Config, rounds []*Round) {
	const row = " %-38s %-12s %-24s %-24s %-20s %s\n"
	fmt.Fprintf(out, row, "target", "goal", "goroce", "TCP", "ratio", "verdict")
	type fig = func(*Round) float64
	cell := func(f fig, format string) string {
		if f == nil {
			return ""
		}
		return bench.Spread(rounds, f, format)
	}
	// line prints a target's row: goroce's figure g, TCP's (nil: none),
	// their ratio or one against something else (nil: none), and the
	// verdict on the median of the ratio, or of g where there is none.
	line := func(name string, t target, format string, g, tcp, ratio fig) {
		judged := g
		if ratio != nil {
			judged = ratio
		}
		fmt.Fprintf(out, row, name, t.goal, cell(g, format), cell(tcp, format), cell(ratio, "%.2fx"), t.verdict(bench.MedianOf(rounds, judged)))
	}
	// vsTCP prints a row of goroce's figure g against TCP's.
	vsTCP := func(name string, t target, format string, g, tcp fig) {
		line(name, t, format, g, tcp, func(r *Round) float64 { return g(r) / tcp(r) })
	}
	bw := func(r *Round) float64 { return r.BW }
	bwTarget := targetBW
	if cfg.Veth {
		bwTarget = targetVeth
	}
	vsTCP(fmt.Sprintf("ib_write_bw %d B, 1 QP [MiB/s]", cfg.Size), bwTarget, "%.0f", bw, func(r *Round) float64 { return r.TCPBW })
	vsTCP("CPU seconds per GB, both processes", targetCPU, "%.2f", func(r *Round) float64 { return r.CPUPerGB }, func(r *Round) float64 { return r.TCPCPUPerGB })
	lat, tcpLat := func(r *Round) float64 { return r.Lat }, func(r *Round) float64 { return r.TCPLat }
	vsTCP("ib_write_lat 2 B t_typical [usec]", targetLat, "%.2f", lat, tcpLat)
	// goroce's busy-poll latency against TCP's whose readers spin too: no
	// target, the like-for-like reference beside the one above, whose TCP
	// readers block and wait to be woken.
	spin := func(r *Round) float64 { return r.TCPSpinLat }
	fmt.Fprintf(out, row, "  the same, TCP's readers spinning", "", cell(lat, "%.2f"), cell(spin, "%.2f"),
		cell(func(r *Round) float64 { return lat(r) / spin(r) }, "%.2fx"), "(reference)")
	if f := bench.MedianOf(rounds, tcpLat) / bench.MedianOf(rounds, spin); f > 2 {
		fmt.Fprintf(out, "   (TCP's blocking ping-pong took %.1fx its spinning one: waking the other process costs most of it on this host, so the latency verdict above says more about the host than about goroce)\n", f)
	}
	// The kernel's floor over UDP: goroce's datagrams between two bare
	// processes; goroce's figure less the floor is its own part.
	if floor := func(r *Round) float64 { return r.FloorLat }; bench.MedianOf(rounds, floor) > 0 {
		fmt.Fprintf(out, row, "  the same, bare UDP (kernel's floor)", "", cell(lat, "%.2f"), cell(floor, "%.2f"),
			cell(func(r *Round) float64 { return lat(r) / floor(r) }, "%.2fx"), "(reference)")
		if own := bench.MedianOf(rounds, func(r *Round) float64 { return lat(r) - floor(r) }); own > 0 {
			fmt.Fprintf(out, "   (goroce's own part, its time less the floor: %.2f us one way)\n", own)
		}
	}
	line("ib_write_bw 64 B [M msg/s]", targetRate, "%.2f", func(r *Round) float64 { return r.Rate }, nil, nil)
	for i, q := range cfg.QPs {
		g := func(r *Round) float64 { return r.QPBW[i] }
		line(fmt.Sprintf("ib_write_bw %d B, %d QPs [MiB/s]", cfg.Size, q), targetQPs, "%.0f", g, nil, func(r *Round) float64 { return g(r) / r.QPRef[i] })
	}
}

// farRounds returns the indexes of the rounds whose cache-line round trip
// (Round.LineRT) took farLine times the run's quickest and
// farLineGapNs more, or farLineNs or more, before or after: the host had
// put the vCPUs far apart for some of the round, which slows every
// transfer between the two processes.
func farRounds(rounds []*Round) []int {
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
// (Round.LineRT) and names the rounds farRounds finds.
func printLines(out io.Writer, rounds []*Round) {
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
