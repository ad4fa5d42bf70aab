// Package monotime is goroce's one monotonic clock: a Time is nanoseconds
// since the process started, an int64 where time.Time takes 24 bytes and
// a comparison of two readings is one instruction. The zero Time means
// "no time" (no deadline, never): Now never returns it.
package monotime

import "time"

// Time is a reading of the monotonic clock in nanoseconds since the
// process's epoch; the zero Time is no time at all.
type Time int64

// epoch is the origin of every Time.
var epoch = time.Now()

// Now returns the current time, never the zero Time.
func Now() Time { return Time(time.Since(epoch)) + 1 }

// IsZero reports whether t is the zero Time (no time).
func (t Time) IsZero() bool { return t == 0 }

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Sub returns the duration t−u.
func (t Time) Sub(u Time) time.Duration { return time.Duration(t - u) }

// Before reports whether t is before u.
func (t Time) Before(u Time) bool { return t < u }

// After reports whether t is after u.
func (t Time) After(u Time) bool { return t > u }

// Since returns the time elapsed since t.
func Since(t Time) time.Duration { return Now().Sub(t) }

// Until returns the duration until t, negative once t has passed.
func Until(t Time) time.Duration { return t.Sub(Now()) }
