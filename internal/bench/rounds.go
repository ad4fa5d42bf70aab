package bench

import (
	"fmt"
	"io"
	"slices"
)

// Rounds runs the benchmark n times, each round goroce then TCP as Run
// does, and prints after the last a summary: the median of each figure
// and of each round's ratio, with their ranges. On a shared machine one
// round's ratio can be far off either way; the median of a few rounds,
// each ratio taken within its own round, holds better.
func Rounds(cfg Config, n int, out io.Writer) ([]*Result, error) {
	if n < 1 {
		return nil, fmt.Errorf("rounds: %d, want at least 1", n)
	}
	var res []*Result
	for i := range n {
		fmt.Fprintf(out, "\n goroce bench: round %d of %d\n", i+1, n)
		r, err := Run(cfg, out)
		if err != nil {
			return res, fmt.Errorf("round %d: %w", i+1, err)
		}
		res = append(res, r)
	}
	PrintSummary(out, res)
	return res, nil
}

// PrintSummary prints the medians (and ranges) of the figures of rounds,
// which ran with the same messages.
func PrintSummary(out io.Writer, rounds []*Result) {
	if len(rounds) == 0 {
		return
	}
	if len(rounds) == 1 {
		fmt.Fprint(out, "\n 1 round\n")
	} else {
		fmt.Fprintf(out, "\n %d rounds: medians (min–max); each ratio is taken within its round\n", len(rounds))
	}
	fmt.Fprintf(out, " %-30s %24s %24s %20s\n", "", "goroce", "TCP", "goroce/TCP")
	row := func(name string, g, t func(*Result) float64) {
		if g(rounds[0]) == 0 {
			return
		}
		ratio := func(r *Result) float64 { return g(r) / t(r) }
		fmt.Fprintf(out, " %-30s %24s %24s %20s\n", name, Spread(rounds, g, "%.2f"), Spread(rounds, t, "%.2f"), Spread(rounds, ratio, "%.2fx"))
	}
	row(fmt.Sprintf("BW average[MiB/sec], %d B", rounds[0].Size),
		func(r *Result) float64 { return r.BW }, func(r *Result) float64 { return r.TCPBW })
	row("t_typical[usec], 2 B, one way",
		func(r *Result) float64 { return r.Lat }, func(r *Result) float64 { return r.TCPLat })
	row("CPU seconds per GB (both ends)",
		func(r *Result) float64 { return r.CPUPerGB }, func(r *Result) float64 { return r.TCPCPUPerGB })
	if rounds[0].UDPBW > 0 {
		fmt.Fprintf(out, " UDP alone (GSO and GRO, no RDMA): %s MiB/s, %s TCP; goroce moves %s of it\n",
			Spread(rounds, func(r *Result) float64 { return r.UDPBW }, "%.2f"),
			Spread(rounds, func(r *Result) float64 { return r.UDPBW / r.TCPBW }, "%.2fx"),
			Spread(rounds, func(r *Result) float64 { return r.BW / r.UDPBW }, "%.2fx"))
	}
	fmt.Fprint(out, " (bandwidth: above 1x goroce is faster; latency and CPU: below 1x goroce is better)\n")
}

// Spread formats the median of f over rounds and, for more than one
// round, its range: "1.32x (1.20x–1.49x)".
func Spread[R any](rounds []R, f func(R) float64, format string) string {
	v := sortedOf(rounds, f)
	m := median(v)
	if len(v) == 1 {
		return fmt.Sprintf(format, m)
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", m, v[0], v[len(v)-1])
}

// MedianOf returns the median of f over rounds.
func MedianOf[R any](rounds []R, f func(R) float64) float64 { return median(sortedOf(rounds, f)) }

// Median returns the median of v, which it leaves as it is.
func Median(v []float64) float64 { return median(slices.Sorted(slices.Values(v))) }

// sortedOf returns f of each round, sorted.
func sortedOf[R any](rounds []R, f func(R) float64) []float64 {
	v := make([]float64, len(rounds))
	for i, r := range rounds {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v
}

// median returns the median of sorted v (the mean of the middle two for
// an even count).
func median(v []float64) float64 {
	n := len(v)
	return (v[(n-1)/2] + v[n/2]) / 2
}
