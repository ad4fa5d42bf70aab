//go:build linux

package udpcost

import (
	"testing"
	"time"
)

// TestRun sends each kind of message udpcost knows for a moment and checks
// that what it counts adds up. It measures no speed.
func TestRun(t *testing.T) {
	for _, c := range []config{
		{size: 1024, gso: 1, per: 16, socks: 1},
		{size: 1024, gso: 1, per: 4, socks: 3, connect: true},
		{size: 4112, gso: 15, first: true, per: 1, socks: 2},
		{size: 1024, gso: 1, per: 16, socks: 1, ipv6: true},
		{size: 4095, gso: 16, per: 1, socks: 1, ipv6: true}, // 65,520 bytes: too many for IPv4, not for IPv6
	} {
		c.dur = 50 * time.Millisecond
		r, err := run(c)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		perMsg := 1
		if c.first {
			perMsg = 2
		}
		bytesPerMsg := uint64(c.size * c.gso)
		if c.first {
			bytesPerMsg += uint64(c.size + 16)
		}
		switch {
		case r.calls == 0 || r.datagrams == 0:
			t.Errorf("%+v: nothing sent: %+v", c, r)
		case r.datagrams > r.calls*uint64(c.per*perMsg):
			t.Errorf("%+v: %d datagrams in %d calls of %d messages", c, r.datagrams, r.calls, c.per)
		case r.bytes < r.datagrams/uint64(perMsg)*bytesPerMsg || r.bytes > r.datagrams*bytesPerMsg:
			t.Errorf("%+v: %d bytes in %d datagrams", c, r.bytes, r.datagrams)
		case r.received == 0 || r.received > r.bytes:
			t.Errorf("%+v: the reader got %d of %d bytes", c, r.received, r.bytes)
		case r.cpu <= 0 || r.elapsed < c.dur:
			t.Errorf("%+v: cpu %v, elapsed %v", c, r.cpu, r.elapsed)
		}
	}
}

// TestRunRejects checks that a configuration that cannot be sent is an
// error, not a run.
func TestRunRejects(t *testing.T) {
	for _, c := range []config{
		{size: 0, gso: 1, per: 1, socks: 1, dur: time.Millisecond},
		{size: 1024, gso: 1, per: 0, socks: 1, dur: time.Millisecond},
		{size: 4112, gso: 16, per: 1, socks: 1, dur: time.Millisecond},
		{size: 4095, gso: 16, per: 1, socks: 1, dur: time.Millisecond},
		{size: 4096, gso: 16, per: 1, socks: 1, ipv6: true, dur: time.Millisecond},
	} {
		if _, err := run(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
