//go:build !goroce_stamps

package stamp

import "io"

// Enabled reports whether the build takes stamps.
const Enabled = false

// Mark does nothing without the goroce_stamps tag.
func Mark(Point) {}

// Close does nothing without the goroce_stamps tag.
func Close() {}

// Reached is false without the goroce_stamps tag.
func Reached(Point) bool { return false }

// Report does nothing without the goroce_stamps tag.
func Report(io.Writer) {}
