package verbs

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/internal/stamp"
)

// Busy polling.
//
// By default the device's reader goroutine waits in the Go netpoller for
// packets, and an application that waits for a completion blocks on a
// channel: a message that ends a wait costs two goroutine wake-ups, a
// few microseconds each, which are most of a small message's latency.
//
// A goroutine that busy-polls instead calls Progress between its checks of
// a CQ or of an MR's remote writes. Progress reads what has arrived on the
// device's socket without waiting and runs the transport on it right
// there, so the completion appears on the polling goroutine with no
// wake-up at all. Meanwhile the reader goroutine stays off the socket (it
// would otherwise be woken for each packet the poller is about to take),
// and the socket is in no epoll set (link.UDP.Interrupt), so no thread of
// the process is woken either; the reader takes the socket back 1 ms after
// the last Progress call, or at once when BusyPoll gives up or EndPoll is
// called.
//
// The cost is a CPU kept busy for as long as the goroutine polls. On a
// host with fewer cores than spinning goroutines, spinning starves
// whoever has to answer (with both ends of a ping-pong on one 2-core
// host, never spin more than one goroutine per process): BusyPoll
// therefore spins for a bounded time and then returns, for the caller to
// block (CompChannel.Get, MR.WaitRemoteWrites).

// Progress drives the device from the calling goroutine: it reads the
// packets that have arrived on the device's socket, without waiting, and
// runs them through the transport, on this goroutine when the QPs' worker
// is idle. It returns how many packets it read: 0 when none had arrived,
// when another goroutine is reading the socket, or after Close.
//
// Completions and remote writes that the packets bring are visible when
// Progress returns, to CQ.Poll and MR.RemoteWrites. Progress never blocks
// on the network; it is safe to call from several goroutines (one at a
// time reads). The first call after polling ended (or ever) waits until
// the reader goroutine has stepped off the socket, at most a millisecond:
// that wait lets the Go scheduler end the reader's wait in the netpoller,
// which a poller that never blocks would not, on a single P, for as long
// as it polled.
func (d *Device) Progress() int { return d.disp.progress(nanotime()) }

// EndPoll tells the device that its busy polling has ended, so that the
// reader goroutine takes the socket back at once rather than 1 ms after
// the last Progress call.
func (d *Device) EndPoll() { d.disp.endPoll() }

// BusyPoll calls done until it returns true, driving the device with
// Progress between calls, for at most spin. It reports whether done
// returned true; when it did not, polling has ended (EndPoll) and the
// caller should block. done runs on the calling goroutine and should be
// cheap: a CQ.Poll, a comparison of MR.RemoteWrites.
//
// After yieldAfter without a result the poller also offers its CPU to
// other threads (sched_yield) between its polls: see yieldAfter. A poller
// whose yield lets another thread run while another goroutine of the
// process polls too moves its thread to another CPU: see unstack.
func (d *Device) BusyPoll(spin time.Duration, done func() bool) bool {
	if done() {
		stamp.Mark(stamp.Done)
		return true
	}
	start := nanotime()
	end := start + int64(spin)
	pollers.Add(1)
	defer pollers.Add(-1)
	sched := start // when the poller last let other goroutines run
	for now := start; ; now = nanotime() {
		if d.disp.queued() {
			// A worker has events queued (the kicks of WRs the caller
			// just posted): let it write them before this poller reads
			// the socket, which would find nothing yet, at the cost of a
			// system call ahead of every burst. The worker's turn can
			// take milliseconds (128 WRITEs of 16 KiB: 1.3 ms), so the
			// clock is read again: progress stamps the poll with now,
			// and a reader that found the stamp older than pollGrace
			// would take the poller for gone and read instead of
			// parking, leaving handOff to wait out pollGrace.
			runtime.Gosched()
			now = nanotime()
		}
		if d.disp.progress(now) == 0 {
			// Let the goroutines that share this P run (timers, a
			// goroutine the application runs beside the poller), every
			// schedEvery: with none, this returns at once, but it takes
			// a sixth of an empty poll's time.
			if now-sched >= int64(schedEvery) {
				runtime.Gosched()
				sched = now
			}
			if now-start > int64(yieldAfter) {
				t := nanotime()
				yieldThread()
				if nanotime()-t > int64(sharedYield) && pollers.Load() > 1 {
					unstack(t)
				}
			}
		}
		if now >= end {
			d.disp.endPoll()
			return done()
		}
		// done before the clock: a poll that brought the message goes
		// straight back to the application.
		if done() {
			stamp.Mark(stamp.Done)
			return true
		}
	}
}

// yieldAfter is how long BusyPoll spins before it offers the thread's
// CPU to others between its polls. Linux wakes a thread on the CPU of
// the thread that woke it when that CPU runs nothing else (a wake-up
// from a loopback send counts as one the sender is about to sleep
// after), unless the thread's previous CPU is idle; on a virtual machine
// an idle vCPU that halted looks preempted, not idle. So a poller's send
// can pull the peer's thread onto the poller's own CPU, where it waits
// for as long as the poller spins: the answer the poller waits for is
// stuck behind it. ib_write_bw between two processes on a 2-vCPU VM
// (docs/perf/HISTORY.md, ninth round) did so often enough that yielding
// after 50 µs moved 64-byte WRITEs 6–20 % faster, 64 KiB WRITEs 5–40 %.
// Counting the 50 µs from the last poll that read something instead of
// from the start of the wait cost 64 KiB WRITEs 16 % (tenth round). Yielding
// after 20 µs cost the 2-byte latency test (whose round trip is about
// 15–20 µs there) a microsecond or two; after 50 µs it is rare there.
const yieldAfter = 50 * time.Microsecond

// schedEvery is how often at most a poller whose polls find nothing lets
// the goroutines that share its P run (runtime.Gosched). A Gosched that
// finds nobody else to run costs about 110 ns on this project's machines,
// and an empty poll (a recvmmsg that finds nothing) about 500: yielding
// after every empty poll made the cycle of a poll that finds a message
// arriving a fifth longer, and the message waited that much more for it
// (BenchmarkBusyPollEmpty). A worker with queued events is let run at
// once all the same (dispatcher.queued).
const schedEvery = 4 * time.Microsecond

// sharedYield is how long a yield (yieldThread) must take for the poller
// to conclude that another thread ran on its CPU meanwhile: a yield that
// finds nobody else runnable returns in a microsecond or two.
const sharedYield = 10 * time.Microsecond

// unstackEvery is how often at most the process moves a poller's thread
// (unstack).
const unstackEvery = 5 * time.Millisecond

var (
	pollers     atomic.Int32 // goroutines of this process in BusyPoll
	lastUnstack atomic.Int64 // nanotime of the last move tried
	unstacked   atomic.Int64 // threads moved, for tests
)

// unstack moves the calling poller's thread to another CPU (moveThread),
// when another goroutine of this process polls too and the last move was
// unstackEvery ago or longer. Two polling threads of one process can end
// up on one CPU while another CPU idles: goroce bench's latency test,
// both ends in one process, each polling, ran at 62–75 µs one way instead
// of 8–12 in 5 of 30 runs of 200 round trips (fifteenth round, the 2-vCPU
// VM of yieldAfter). A scheduler trace (sched_switch) showed the two
// threads on one vCPU taking turns at each yield, the other vCPU idle:
// a wake-up during the connection's setup had put the woken thread on its
// waker's CPU, and the kernel's load balancer leaves alone threads that
// ran within the last half millisecond, which both always have. A yield
// does not make the kernel place a thread anew; a change of its CPU
// affinity does. With the move, none of 60 runs was slow. Only pollers of
// one process are moved: between two processes, where the thread that
// ran may be anybody's, moving on every long yield cost ib_write_bw in
// two of four rotated rounds (64-byte WRITEs 0.91–0.95 M/s against
// 1.14–1.31, a 64 KiB run 661 MiB/s against 1,813–2,084).
func unstack(now int64) {
	last := lastUnstack.Load()
	if now-last < int64(unstackEvery) || !lastUnstack.CompareAndSwap(last, now) {
		return
	}
	if moveThread() {
		unstacked.Add(1)
	}
}
