package verbs

import (
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestBusyPollUnstacks puts the threads of two goroutines that busy-poll
// a WRITE ping-pong between two devices of this process on one CPU, then
// lets them run anywhere again, as the kernel leaves two threads it has
// put together: a poller whose yield lets the other run must move its
// thread away (unstack). The kernel may part them by itself as well, in
// this short run; where they end is only logged.
func TestBusyPollUnstacks(t *testing.T) {
	var mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mask); err != nil || mask.Count() < 2 || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two CPUs and two Ps")
	}
	var one unix.CPUSet
	for c := 0; ; c++ {
		if mask.IsSet(c) {
			one.Set(c)
			break
		}
	}
	a, b := pairOn(t, newUDPDevices, 1<<16, MTU1024)
	lastUnstack.Store(0)
	before := unstacked.Load()
	const rounds = 2000
	var pinned, wg sync.WaitGroup
	pinned.Add(2)
	errs := make([]error, 2)
	cpus := make([]uint32, 2)
	side := func(k int, me, peer *endpoint) {
		defer wg.Done()
		// Both threads on one CPU, then free to run anywhere: the kernel
		// leaves them where they are. The goroutines keep their threads
		// while they poll (each holds a P and yields it to nobody).
		runtime.LockOSThread()
		err := unix.SchedSetaffinity(0, &one)
		pinned.Done()
		pinned.Wait()
		if err == nil {
			err = unix.SchedSetaffinity(0, &mask)
		}
		runtime.UnlockOSThread()
		if err != nil {
			errs[k] = err
			return
		}
		for i := 1; i <= rounds; i++ {
			if k == 1 || i > 1 { // b answers a's WRITE i with its own
				want := uint64(i)
				if k == 0 {
					want = uint64(i - 1)
				}
				if !me.dev.BusyPoll(5*time.Second, func() bool { return me.mr.RemoteWrites() >= want }) {
					errs[k] = unix.ETIMEDOUT
					return
				}
			}
			if _, err := me.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []SGE{me.mr.SGE(0, 8)},
				RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}); err != nil {
				errs[k] = err
				return
			}
		}
		unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpus[k])), 0, 0)
	}
	wg.Add(2)
	go side(0, a, b)
	go side(1, b, a)
	t0 := time.Now()
	wg.Wait()
	t.Logf("%v per round trip, %d moves; the threads ended on CPUs %v", time.Since(t0)/rounds, unstacked.Load()-before, cpus)
	for k, err := range errs {
		if err != nil {
			t.Fatalf("side %d: %v", k, err)
		}
	}
	if unstacked.Load() == before {
		t.Error("no poller moved its thread")
	}
	a.dev.EndPoll()
	b.dev.EndPoll()
}
