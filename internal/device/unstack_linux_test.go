package device

import (
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/qpstate"
	"github.com/goroce/goroce/internal/transport"
)

// TestBusyPollUnstacks puts the threads of two goroutines that busy-poll
// a WRITE ping-pong between two engines of this process on one CPU, then
// lets them run anywhere again, as the kernel leaves two threads it has
// put together: a poller whose yield lets the other run must move its
// thread away (unstack). The kernel may part them by itself before a
// poller yields long enough to move (in a fifth to a third of the
// attempts on the 2-vCPU test VM, some days), so an attempt without a
// move is made again, up to eight times: with unstack working, eight
// in a row without a move come about once in ten thousand runs; with it
// broken, every attempt ends without one. Two threads that end an
// attempt stacked on one CPU with no move made fail at once.
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
	const attempts = 8
	for attempt := 1; attempt <= attempts; attempt++ {
		moves, cpus := stackedPingPong(t, one, mask)
		switch {
		case moves > 0:
			return
		case cpus[0] == cpus[1]:
			t.Fatalf("attempt %d: the pollers' threads stayed stacked on CPU %d and no poller moved", attempt, cpus[0])
		}
		t.Logf("attempt %d: the kernel parted the threads before a poller moved (CPUs %v)", attempt, cpus)
	}
	t.Fatalf("no poller moved its thread in %d attempts", attempts)
}

// stackedPingPong runs 2,000 round trips of a WRITE ping-pong between two
// new engines, each end's goroutine busy-polling on a thread that starts
// on the CPU of one and then may run on any of mask's. It returns the
// threads the pollers moved (unstack) and the CPUs they ended on.
func stackedPingPong(t *testing.T, one, mask unix.CPUSet) (int64, [2]uint32) {
	a, b := pairOf(t, "udp", 1<<16)
	defer func() {
		a.e.EndPoll()
		b.e.EndPoll()
	}()
	lastUnstack.Store(0)
	before := unstacked.Load()
	const rounds = 2000
	var pinned, wg sync.WaitGroup
	pinned.Add(2)
	errs := make([]error, 2)
	var cpus [2]uint32
	side := func(k int, me, peer *end) {
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
				if !me.e.BusyPoll(5*time.Second, func() bool { return me.mr.RemoteWrites() >= want }) {
					errs[k] = unix.ETIMEDOUT
					return
				}
			}
			if _, err := me.qp.PostSend([]transport.SendWR{{WRID: uint64(i), Opcode: transport.WRRDMAWrite,
				SGL: []memory.SGE{{Addr: me.mr.Addr(), Length: 8, LKey: me.mr.LKey()}}, RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}}, qpstate.RTS); err != nil {
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
	moves := unstacked.Load() - before
	t.Logf("%v per round trip, %d moves; the threads ended on CPUs %v", time.Since(t0)/rounds, moves, cpus)
	for k, err := range errs {
		if err != nil {
			t.Fatalf("side %d: %v", k, err)
		}
	}
	return moves, cpus
}
