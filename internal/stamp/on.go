//go:build goroce_stamps

package stamp

import (
	"io"

	"github.com/goroce/goroce/internal/monotime"
)

// Enabled reports whether the build takes stamps.
const Enabled = true

var rec = recorder{clock: func() int64 { return int64(monotime.Now()) }}

// Mark notes that the open row reached p (recorder.mark).
func Mark(p Point) { rec.mark(p) }

// Reached reports whether the open row reached p.
func Reached(p Point) bool { return rec.reached(p) }

// Close ends the open row at Sent.
func Close() { rec.close() }

// Report prints the medians of the rows so far, the first skipRows left
// out (recorder.report).
func Report(w io.Writer) { rec.report(w, skipRows) }
