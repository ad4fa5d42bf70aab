// Package stamp times the steps of a ping-pong message's way through
// goroce, from the read that brings the peer's message to the system call
// that sends the answer, for profiling the latency path (docs/PERFORMANCE.md).
// Built with -tags goroce_stamps, each Mark notes
// when a step was first reached since the message was read, and Report
// prints the median time between steps over the messages seen; without
// the tag every function here is an empty one the compiler drops.
//
// The stamps are plain globals written by whichever goroutine gets there:
// they assume one goroutine drives the device at a time (a latency test's
// busy poller) and are not for builds with -race. Each stamp is a clock
// read, which the intervals include.
package stamp

import (
	"fmt"
	"io"
	"slices"
)

// Point is a step of a message's way.
type Point int

// The steps, in the order a busy-polled ping-pong reaches them.
const (
	Read     Point = iota // a read system call returned datagrams (opens a row)
	LinkRead              // the link has split and checked them
	Routed                // the dispatcher has them, routing to a worker
	Handle                // the worker starts on the batch
	Received              // the transport has taken every packet of it
	Progress              // the worker's turn ran the QPs (the ACK queued)
	TurnEnd               // the turn is over
	Done                  // the poller's condition holds (BusyPoll returns)
	Post                  // the application posts its answer (verbs.QP.PostSend)
	Posted                // the transport has the WQE
	Inline                // the posting goroutine runs the worker
	Built                 // the answer's packets are built
	Flush                 // the worker writes them
	Send                  // the send system call starts
	Sent                  // it returned (closes the row)
	numPoints
)

var names = [numPoints]string{"read", "link", "routed", "handle", "received", "progress", "turnend",
	"done", "post", "posted", "inline", "built", "flush", "send", "sent"}

func (p Point) String() string { return names[p] }

const (
	skipRows = 2000    // the first rows, while caches and branch predictors warm
	maxRows  = 1 << 17 // rows kept
)

// recorder keeps the rows: the build with the tag has one, driven by the
// package's functions; tests drive their own with a fake clock.
type recorder struct {
	clock func() int64       // nanoseconds, never 0
	cur   [numPoints]int64   // the open row: 0 where not reached
	rows  [][numPoints]int64 // closed rows
}

// mark notes that the open row reached p, unless it already did; Read
// opens a row when none is open, and no other point is noted outside one.
func (r *recorder) mark(p Point) {
	if r.cur[p] != 0 || (p != Read && r.cur[Read] == 0) {
		return
	}
	r.cur[p] = r.clock()
}

// reached reports whether the open row reached p.
func (r *recorder) reached(p Point) bool { return r.cur[p] != 0 }

// close ends the open row at Sent. A row that skipped a step is kept; the
// step then counts in no interval of it.
func (r *recorder) close() {
	if r.cur[Read] == 0 {
		return
	}
	r.mark(Sent)
	if len(r.rows) < maxRows {
		r.rows = append(r.rows, r.cur)
	}
	r.cur = [numPoints]int64{}
}

// report prints the median time between the steps most rows reached, with
// the quartiles, and from Read to Send; skip rows are left out first.
func (r *recorder) report(w io.Writer, skip int) {
	if len(r.rows) <= skip {
		fmt.Fprintf(w, "stamps: %d messages, too few\n", len(r.rows))
		return
	}
	rs := r.rows[skip:]
	fmt.Fprintf(w, "stamps: %d messages, ns between steps (p25 median p75)\n", len(rs))
	interval := func(from, to Point) {
		var d []int64
		for _, row := range rs {
			if row[from] != 0 && row[to] != 0 {
				d = append(d, row[to]-row[from])
			}
		}
		if len(d) == 0 {
			return
		}
		slices.Sort(d)
		fmt.Fprintf(w, "  %-8s -> %-8s %6d %6d %6d\n", from, to, d[len(d)/4], d[len(d)/2], d[3*len(d)/4])
	}
	prev := Read
	for p := Read + 1; p < numPoints; p++ {
		reached := 0
		for _, row := range rs {
			if row[p] != 0 {
				reached++
			}
		}
		if reached*2 < len(rs) {
			continue // a step most messages skip
		}
		interval(prev, p)
		prev = p
	}
	interval(Read, Send)
}
