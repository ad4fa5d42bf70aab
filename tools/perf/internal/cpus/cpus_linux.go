// Package cpus tells how far apart the host has put two CPUs: the time a
// cache line takes from one to the other and back.
package cpus

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// LineRoundTrip measures how long a cache line takes to go from one CPU
// to another and back: two threads, each pinned to one of the first two
// CPUs this process may run on, take turns writing a counter the other
// spins on, for about d. It returns the mean round trip, or 0 when the
// process may run on fewer than two CPUs (or on one P).
//
// On a virtual machine the figure says where the host has put the two
// vCPUs, and a host may move them for stretches of seconds or minutes:
// close, as two cores of one socket, the round trip takes a hundred
// nanoseconds or so; far apart, several times that, and every transfer
// between two processes on the two vCPUs is slower, the same-host ring's
// above all. The targets measure it around each round and the sweep
// around each section, so that slow figures show why.
func LineRoundTrip(d time.Duration) time.Duration {
	var set unix.CPUSet
	if runtime.GOMAXPROCS(0) < 2 || unix.SchedGetaffinity(0, &set) != nil || set.Count() < 2 {
		return 0
	}
	var cpus []int
	for c := 0; len(cpus) < 2; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	// The two counters on lines of their own: one side writes ping and
	// spins on pong, the other answers each ping. Either gives up once
	// the deadline has passed, so that a peer that never ran (a CPU taken
	// away meanwhile) cannot hold it; stop in ping ends the answering side.
	var lines struct {
		ping atomic.Uint64
		_    [56]byte
		pong atomic.Uint64
		_    [56]byte
	}
	const stop = ^uint64(0)
	deadline := time.Now().Add(d + time.Second)
	late := func(n int) bool { return n&0xffff == 0xffff && time.Now().After(deadline) }
	pinned := func(cpu int) bool {
		// The thread stays locked: it exits with its goroutine instead
		// of going back to the runtime pinned to one CPU.
		runtime.LockOSThread()
		var one unix.CPUSet
		one.Set(cpu)
		return unix.SchedSetaffinity(0, &one) == nil
	}
	ready := make(chan bool, 1)
	go func() {
		ok := pinned(cpus[1])
		ready <- ok
		for want, n := uint64(1), 0; ok; n++ {
			switch v := lines.ping.Load(); {
			case v == stop || late(n):
				return
			case v == want:
				lines.pong.Store(want)
				want++
			}
		}
	}()
	result := make(chan time.Duration, 1)
	go func() {
		defer lines.ping.Store(stop)
		if !pinned(cpus[0]) || !<-ready {
			result <- 0
			return
		}
		start := time.Now()
		trips := uint64(0)
		for time.Since(start) < d {
			for range 1000 {
				trips++
				lines.ping.Store(trips)
				for n := 0; lines.pong.Load() != trips; n++ {
					if late(n) {
						result <- 0
						return
					}
				}
			}
		}
		result <- time.Since(start) / time.Duration(trips)
	}()
	return <-result
}
