package perftest

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// Perftest's report strings (perftest_parameters.h, perftest 6.x).
const (
	resultLine   = "---------------------------------------------------------------------------------------\n"
	resultFmt    = " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
	resultFmtG   = " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
	resultFmtLat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	resultFmtDur = " #bytes        #iterations       t_avg[usec]    tps average"
	// latTail is LAT_MEASURE_TAIL: the largest samples dropped.
	latTail = 2
)

// header prints the test information block (ctx_print_test_info).
// The device, MTU and GID index are the run's (p.devName, p.mtuBytes,
// p.gidIndex).
func (p *Params) header(w io.Writer, client bool) {
	var b strings.Builder
	b.WriteString(resultLine)
	b.WriteString("                    " + p.verbStr() + " ")
	if p.Verb == Atomic {
		b.WriteString(p.AtomicOp + " ")
	}
	if p.Kind == BW {
		if p.Duplex {
			b.WriteString("Bidirectional ")
		}
		if p.PostList > 1 {
			b.WriteString("Post List ")
		}
		b.WriteString("BW ")
	} else {
		b.WriteString("Latency ")
	}
	b.WriteString("Test\n")
	if p.Events {
		b.WriteString(" Test with events.\n")
	}
	fmt.Fprintf(&b, " Dual-port       : OFF\t\tDevice         : %s\n", p.devName)
	fmt.Fprintf(&b, " Number of qps   : %d\t\tTransport type : IB\n", p.QPs)
	fmt.Fprintf(&b, " Connection type : %s\t\tUsing SRQ      : OFF\n", p.Conn)
	b.WriteString(" PCIe relax order: Unsupported\n")
	b.WriteString(" ibv_wr* API     : OFF\n")
	if client || p.Duplex {
		fmt.Fprintf(&b, " TX depth        : %d\n", p.TxDepth)
	}
	if p.PostList > 1 {
		fmt.Fprintf(&b, " Post List       : %d\n", p.PostList)
	}
	if p.Verb == Send && (!client || p.Duplex) {
		fmt.Fprintf(&b, " RX depth        : %d\n", p.RxDepth)
	}
	if p.Kind == BW {
		fmt.Fprintf(&b, " CQ Moderation   : %d\n", p.CQMod)
	}
	fmt.Fprintf(&b, " Mtu             : %d[B]\n", p.mtuBytes)
	b.WriteString(" Link type       : Ethernet\n")
	fmt.Fprintf(&b, " GID index       : %d\n", p.gidIndex)
	if p.Verb != Read && p.Verb != Atomic {
		fmt.Fprintf(&b, " Max inline data : %d[B]\n", p.Inline)
	} else {
		fmt.Fprintf(&b, " Outstand reads  : %d\n", p.OutReads)
	}
	b.WriteString(" rdma_cm QPs\t : OFF\n")
	b.WriteString(" Data ex. method : Ethernet\n")
	b.WriteString(resultLine)
	io.WriteString(w, b.String())
}

// altHex is C's "%#0<width>x": a 0x prefix counted in the width, except
// for zero, which is printed as zeros only.
func altHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// address prints a QP's address lines (ctx_print_pingpong_data).
func (p *Params) address(w io.Writer, side string, d Dest) {
	var b strings.Builder
	fmt.Fprintf(&b, " %s address: LID %s QPN %s PSN %s", side, altHex(uint64(d.LID), 4), altHex(uint64(d.QPN), 6), altHex(uint64(d.PSN), 6))
	if p.Verb == Read {
		fmt.Fprintf(&b, " OUT %s", altHex(uint64(d.OutReads), 4))
	}
	if p.Verb == Read || p.Verb == Write {
		fmt.Fprintf(&b, " RKey %s VAddr %s", altHex(uint64(d.RKey), 8), altHex(d.VAddr, 16))
	}
	b.WriteString("\n GID: ")
	for i, x := range d.GID {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02d", x)
	}
	b.WriteByte('\n')
	io.WriteString(w, b.String())
}

// bwHeader prints the BW table's header.
func (p *Params) bwHeader(w io.Writer) {
	io.WriteString(w, resultLine)
	if p.Gbits {
		io.WriteString(w, resultFmtG+"\n")
	} else {
		io.WriteString(w, resultFmt+"\n")
	}
}

// latHeader prints the latency table's header.
func (p *Params) latHeader(w io.Writer) {
	io.WriteString(w, resultLine)
	if p.Duration > 0 {
		io.WriteString(w, resultFmtDur+"\n")
	} else {
		io.WriteString(w, resultFmtLat+"\n")
	}
}

// bwTimes are a bandwidth run's timestamps in nanoseconds, as perftest
// keeps them: posted[i] when WR i was posted, completed[j] when the
// completion that covers WR j arrived. Without peak (noPeak) only
// posted[0] and completed[0] — start and end — are kept.
type bwTimes struct {
	posted, completed []int64
	iters             int // WRs measured, over all QPs
	size              int
	noPeak            bool
	cqMod, postList   int
}

// report computes perftest's bandwidth figures (print_report_bw).
func (p *Params) report(t *bwTimes) BWReport {
	f := 1048576.0
	if p.Gbits {
		f = 125e6
	}
	n := t.iters
	last := n - 1
	if t.noPeak {
		last = 0
	}
	sum := float64(t.completed[last] - t.posted[0])
	if sum <= 0 {
		sum = 1
	}
	r := BWReport{Size: uint64(t.size), Iters: uint64(n)}
	r.BWAvg = float64(t.size) * float64(n) * 1e9 / (sum * f)
	r.MsgRate = float64(n) * 1e9 / (sum * 1e6)
	if !t.noPeak && n > 0 {
		opt := peakDelta(t.posted, t.completed, n, t.cqMod, t.postList)
		if opt > 0 {
			r.BWPeak = float64(t.size) * 1e9 / (float64(opt) * f)
		}
	}
	return r
}

// bwRow prints one BW table row (print_full_bw_report); with rem, the
// peer's figures are added (bidirectional runs).
func (p *Params) bwRow(w io.Writer, my BWReport, rem *BWReport) {
	r := my
	if rem != nil {
		r.BWPeak += rem.BWPeak
		r.BWAvg += rem.BWAvg
		r.MsgRate += rem.MsgRate
	}
	if p.Gbits && r.BWAvg < 0.1 {
		fmt.Fprintf(w, " %-7d    %d           %-7.6f            %-7.6f            %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	} else {
		fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f\n", r.Size, r.Iters, r.BWPeak, r.BWAvg, r.MsgRate)
	}
	p.writeJSON(map[string]any{"MsgSize": r.Size, "n_iterations": r.Iters, "BW_peak": round(r.BWPeak, 2),
		"BW_average": round(r.BWAvg, 2), "MsgRate": round(r.MsgRate, 6)})
}

// LatStats are perftest's latency figures in microseconds.
type LatStats struct {
	Size, Iters                              int
	Min, Max, Typical, Avg, Stdev, P99, P999 float64
}

// latency computes perftest's latency figures from post timestamps
// (print_report_lat): iters−1 deltas, sorted, the two largest dropped;
// read and atomic report the full round trip, send and write half of it.
func (p *Params) latency(w io.Writer, posted []int64, size int) LatStats {
	n := len(posted) - 1
	q := 1000.0 // ns per µs
	if p.Verb == Send || p.Verb == Write {
		q *= 2
	}
	delta := make([]int64, n)
	for i := range delta {
		delta[i] = posted[i+1] - posted[i]
	}
	if p.Unsorted {
		fmt.Fprintln(w, "#, usec")
		for i, d := range delta {
			fmt.Fprintf(w, "%d, %g\n", i+1, float64(d)/q)
		}
	}
	slices.Sort(delta)
	m := n - latTail
	var median int64
	if (m-1)%2 != 0 {
		median = (delta[m/2] + delta[m/2-1]) / 2
	} else {
		median = delta[m/2]
	}
	var sum float64
	for _, d := range delta[:m] {
		sum += float64(d) / q
	}
	avg := sum / float64(m)
	var varSum float64
	for _, d := range delta[:m] {
		t := int(avg - float64(d)/q) // perftest truncates each term to an int
		varSum += float64(t * t)
	}
	if p.Histogram {
		fmt.Fprintln(w, "#, usec")
		for i, d := range delta[:m] {
			fmt.Fprintf(w, "%d, %g\n", i+1, float64(d)/q)
		}
	}
	if p.Unsorted || p.Histogram {
		p.latHeader(w)
	}
	i99, i999 := int(math.Ceil(float64(m)*0.99)), int(math.Ceil(float64(m)*0.999))
	return LatStats{Size: size, Iters: n + 1, Min: float64(delta[0]) / q, Max: float64(delta[m]) / q,
		Typical: float64(median) / q, Avg: avg, Stdev: math.Sqrt(varSum / float64(m)),
		P99: float64(delta[i99]) / q, P999: float64(delta[i999]) / q}
}

// latRow prints one LAT table row.
func (p *Params) latRow(w io.Writer, s LatStats) {
	fmt.Fprintf(w, " %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		s.Size, s.Iters, s.Min, s.Max, s.Typical, s.Avg, s.Stdev, s.P99, s.P999)
	p.writeJSON(map[string]any{"MsgSize": s.Size, "n_iterations": s.Iters, "t_min": round(s.Min, 2),
		"t_max": round(s.Max, 2), "t_typical": round(s.Typical, 2), "t_avg": round(s.Avg, 2),
		"t_stdev": round(s.Stdev, 2), "percentile_99": round(s.P99, 2), "percentile_99_9": round(s.P999, 2)})
}

// latDurRow prints the row of a timed latency run (print_report_lat_duration):
// iters round trips in elapsed nanoseconds.
func (p *Params) latDurRow(w io.Writer, size, iters int, elapsed int64) {
	rtt := 1.0
	if p.Verb == Send || p.Verb == Write {
		rtt = 2
	}
	lat := float64(elapsed) / 1000 / rtt / float64(max(iters, 1))
	tps := float64(iters) / (float64(elapsed) / 1e9)
	fmt.Fprintf(w, " %-7d       %d            %-7.2f        %-7.2f\n", size, iters, lat, tps)
	p.writeJSON(map[string]any{"MsgSize": size, "n_iterations": iters, "t_avg": round(lat, 2), "tps_average": round(tps, 2)})
}

func round(x float64, digits int) float64 {
	s := math.Pow(10, float64(digits))
	return math.Round(x*s) / s
}

// writeJSON writes --out_json's file: the test information and the last
// result row, as perftest does (its keys, as valid JSON).
func (p *Params) writeJSON(results map[string]any) {
	if !p.JSON {
		return
	}
	name := p.JSONFile
	if name == "" {
		name = "perftest_out.json"
	}
	test := p.verbStr() + "_"
	if p.Verb == Atomic {
		test += p.AtomicOp + "_"
	}
	if p.Kind == BW {
		if p.Duplex {
			test += "Bidirectional_"
		}
		test += "BW_"
	} else {
		test += "Latency_"
	}
	info := map[string]any{"test": test + "Test", "Dual_port": "OFF", "Device": p.devName,
		"Number_of_qps": p.QPs, "Transport_type": "IB", "Connection_type": p.Conn, "Using_SRQ": "OFF",
		"Mtu": p.mtuBytes, "Link_type": "Ethernet", "GID_index": p.gidIndex}
	if p.Kind == BW {
		info["TX_depth"], info["CQ_Moderation"] = p.TxDepth, p.CQMod
	}
	b, _ := json.MarshalIndent(map[string]any{"test_info": info, "results": results}, "", "  ")
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, " Couldn't write %s: %v\n", name, err)
	}
}

// LatencyStats computes perftest's latency figures for p's test from post
// timestamps (nanoseconds) of a ping-pong or of sequential round trips.
func LatencyStats(p *Params, posted []int64) LatStats { return p.latency(io.Discard, posted, p.Size) }

// peakDelta is perftest's peak interval: the smallest mean time per WR,
// (completed[j] − posted[i]) / (j − i + 1) rounded down, over every WR i a
// post started (i a multiple of postList) and every completion j ≥ i (j ≡
// cqMod − 1 mod cqMod, and the last WR). perftest tries every pair,
// O(n²/cqMod), a second of CPU at 20000 iterations; this finds the same
// minimum in O(n log n): for a completion j, the best i is where the line
// from the point (j+1, completed[j]) touches the upper convex hull of the
// points (i, posted[i]) — the smallest slope from the left.
func peakDelta(posted, completed []int64, n, cqMod, postList int) int64 {
	type pt struct{ x, y int64 }
	var hull []pt
	// above reports whether b is strictly above the line from a to c.
	above := func(a, b, c pt) bool { return (b.x-a.x)*(c.y-a.y) < (b.y-a.y)*(c.x-a.x) }
	// less reports whether the slope from a to q is below that from b to q.
	less := func(a, b, q pt) bool { return (q.y-a.y)*(q.x-b.x) < (q.y-b.y)*(q.x-a.x) }
	best := int64(math.MaxInt64)
	next := 0 // the next i to add to the hull
	query := func(j int) {
		for ; next <= j; next += postList {
			p := pt{int64(next), posted[next]}
			for len(hull) >= 2 && !above(hull[len(hull)-2], hull[len(hull)-1], p) {
				hull = hull[:len(hull)-1]
			}
			hull = append(hull, p)
		}
		q := pt{int64(j + 1), completed[j]}
		// The slope to q falls along the hull and then rises: find the turn.
		lo, hi := 0, len(hull)-1
		for lo < hi {
			m := (lo + hi) / 2
			if less(hull[m+1], hull[m], q) {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if d := (q.y - hull[lo].y) / (q.x - hull[lo].x); d < best {
			best = d
		}
	}
	for j := cqMod - 1; j < n; j += cqMod {
		query(j)
	}
	if n%cqMod != 0 {
		query(n - 1)
	}
	return best
}
