package stamp

import (
	"strings"
	"testing"
)

// TestRecorder drives a recorder with a fake clock through rows of a
// ping-pong's steps and checks what the report makes of them: medians of
// the intervals between the steps most rows reached, a step that most
// rows skip left out, marks outside a row and repeated marks ignored.
func TestRecorder(t *testing.T) {
	var now int64
	r := recorder{clock: func() int64 { return now }}
	at := func(ns int64, p Point) { now = ns; r.mark(p) }
	for i := range 5 {
		base := int64(1_000_000 * (i + 1))
		at(base-500, Done) // outside a row: ignored
		at(base, Read)
		at(base+100, LinkRead)
		at(base+150, Read) // already reached: ignored
		if i == 0 {
			at(base+120, Inline) // one row in five: left out
		}
		at(base+200+int64(i)*10, Post) // 200, 210, 220, 230, 240
		if !r.reached(Post) || r.reached(Send) {
			t.Fatalf("row %d: reached Post %v, Send %v", i, r.reached(Post), r.reached(Send))
		}
		at(base+1000, Send)
		now = base + 4000
		r.close()
	}
	r.close() // no row open: nothing
	if len(r.rows) != 5 {
		t.Fatalf("%d rows, want 5", len(r.rows))
	}
	var b strings.Builder
	r.report(&b, 1)
	got := b.String()
	for _, want := range []string{
		"stamps: 4 messages",
		"read     -> link        100    100    100",
		"link     -> post        120    130    140",
		"post     -> send        770    780    790",
		"send     -> sent       3000   3000   3000",
		"read     -> send       1000   1000   1000",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "inline") || strings.Contains(got, "done") {
		t.Errorf("report has a step the rows skipped:\n%s", got)
	}
	b.Reset()
	r.report(&b, 5)
	if !strings.Contains(b.String(), "too few") {
		t.Errorf("report of no rows: %q", b.String())
	}
}
