package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// The numbers one side printed.
type report struct {
	ok     bool
	bytes  int
	iters  int
	values []float64 // bw: peak, avg, Mpps; lat: min, max, typical, avg, ...; pp: seconds, Mbit/s, usec/iter
	err    string
}

var floatRe = `([-+0-9.eE]+|-?nan|-?inf)`

// parseBW finds the BW result line of a perftest report.
func parseBW(out string) report {
	return parseTable(out, "BW average", 5)
}

// parseLat finds the latency result line of a perftest report.
func parseLat(out string) report {
	return parseTable(out, "t_typical", 7)
}

func parseTable(out, header string, minFields int) report {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") || !strings.Contains(l, header) {
			continue
		}
		for _, m := range lines[i+1:] {
			f := strings.Fields(m)
			if len(f) == 0 {
				continue
			}
			if len(f) < minFields {
				break
			}
			b, err1 := strconv.Atoi(f[0])
			it, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				break
			}
			r := report{ok: true, bytes: b, iters: it}
			for _, s := range f[2:] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return report{err: "bad number " + s}
				}
				r.values = append(r.values, v)
			}
			return r
		}
	}
	return report{err: "no result table"}
}

var (
	ppBytes = regexp.MustCompile(`(?m)^(\d+) bytes in ` + floatRe + ` seconds = ` + floatRe + ` Mbit/sec`)
	ppIters = regexp.MustCompile(`(?m)^(\d+) iters in ` + floatRe + ` seconds = ` + floatRe + ` usec/iter`)
)

// parsePP finds the two result lines of ibv_*_pingpong.
func parsePP(out string) report {
	mb := ppBytes.FindStringSubmatch(out)
	mi := ppIters.FindStringSubmatch(out)
	if mb == nil || mi == nil {
		return report{err: "no result lines"}
	}
	b, _ := strconv.Atoi(mb[1])
	it, _ := strconv.Atoi(mi[1])
	secs, _ := strconv.ParseFloat(mb[2], 64)
	mbit, _ := strconv.ParseFloat(mb[3], 64)
	us, _ := strconv.ParseFloat(mi[3], 64)
	return report{ok: true, bytes: b, iters: it, values: []float64{secs, mbit, us}}
}

// check parses one side's output and says what is implausible about it.
// need is false where the real tool prints no table on that side.
func check(c cell, out string, need bool) (report, string) {
	var r report
	switch c.kind {
	case "bw":
		r = parseBW(out)
	case "lat":
		r = parseLat(out)
	case "pp":
		r = parsePP(out)
	}
	if !r.ok {
		if !need {
			return r, ""
		}
		return r, r.err
	}
	switch c.kind {
	case "bw":
		if r.bytes != c.size {
			return r, fmt.Sprintf("#bytes %d, want %d", r.bytes, c.size)
		}
		if r.iters != c.iters {
			return r, fmt.Sprintf("#iterations %d, want %d", r.iters, c.iters)
		}
		// perftest prints 2 decimals of MiB/s: 2-byte messages show 0.00,
		// so the message rate is what must be positive, and the average
		// must agree with it.
		avg, rate := r.values[1], r.values[2]
		if !(rate > 0 && rate < 100) {
			return r, fmt.Sprintf("MsgRate %v Mpps", rate)
		}
		if want := rate * 1e6 * float64(c.size) / (1 << 20); !(avg >= 0 && math.Abs(avg-want) <= 0.01+0.1*want) {
			return r, fmt.Sprintf("BW average %v MiB/s, but %v Mpps of %d bytes is %.3f", avg, rate, c.size, want)
		}
	case "lat":
		if r.bytes != c.size {
			return r, fmt.Sprintf("#bytes %d, want %d", r.bytes, c.size)
		}
		if r.iters != c.iters {
			return r, fmt.Sprintf("#iterations %d, want %d", r.iters, c.iters)
		}
		mn, mx, typ, avg := r.values[0], r.values[1], r.values[2], r.values[3]
		if !(mn > 0 && mn <= typ && typ <= mx && mn <= avg && avg <= mx && mx < 1e7) {
			return r, fmt.Sprintf("latencies min %v typical %v avg %v max %v", mn, typ, avg, mx)
		}
	case "pp":
		if r.iters != c.iters {
			return r, fmt.Sprintf("%d iters, want %d", r.iters, c.iters)
		}
		if want := 2 * c.size * c.iters; r.bytes != want {
			return r, fmt.Sprintf("%d bytes, want %d", r.bytes, want)
		}
		if !(r.values[1] > 0 && r.values[2] > 0) {
			return r, fmt.Sprintf("rates %v Mbit/s %v usec/iter", r.values[1], r.values[2])
		}
	}
	return r, ""
}

// serverPrints says whether the real tool prints a result table on the
// server side (perftest's read/atomic latency servers print none).
func serverPrints(c cell) bool {
	return c.kind != "lat" || c.tool == "ib_send_lat" || c.tool == "ib_write_lat"
}

func summary(c cell, r report) string {
	if !r.ok {
		return "-"
	}
	switch c.kind {
	case "bw":
		return fmt.Sprintf("%.2f MB/s %.4f Mpps", r.values[1], r.values[2])
	case "lat":
		return fmt.Sprintf("%.1f us", r.values[2])
	default:
		return fmt.Sprintf("%.1f us/it", r.values[2])
	}
}

var countersLine = regexp.MustCompile(`(?m)^counters:((?: [a-z0-9_]+=\d+)*)\s*$`)

// parseCounters reads the line goroce's tools print at exit with
// GOROCE_PRINT_COUNTERS=1, "counters: name=value ..."; nil without one.
func parseCounters(out string) map[string]uint64 {
	m := countersLine.FindStringSubmatch(out)
	if m == nil {
		return nil
	}
	c := map[string]uint64{}
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		c[k], _ = strconv.ParseUint(v, 10, 64)
	}
	return c
}

// parseHWCounters reads rxe's port counters as `grep . *` prints them in
// its hw_counters folder: "name:value" lines.
func parseHWCounters(out string) map[string]uint64 {
	c := map[string]uint64{}
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if n, err := strconv.ParseUint(v, 10, 64); ok && err == nil {
			c[k] = n
		}
	}
	return c
}

// recoveryCounters are the counters, goroce's and rxe's alike, that show
// how a run recovered from loss: a note names those that are not 0.
var recoveryCounters = []string{"early_go_backs", "completer_retry_err", "rcvd_seq_err", "retry_exceeded_err",
	"duplicate_request", "out_of_seq_request", "icrc_errors", "socket_drops"}

// recoveryNote is "who name=value ..." for the recovery counters of c
// that are not 0, or "" if all are.
func recoveryNote(who string, c map[string]uint64) string {
	var b strings.Builder
	for _, k := range recoveryCounters {
		if c[k] != 0 {
			fmt.Fprintf(&b, " %s=%d", k, c[k])
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return who + b.String()
}
