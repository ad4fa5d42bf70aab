package verbs

import "golang.org/x/sys/unix"

// yieldThread offers the calling thread's CPU to other runnable threads
// (sched_yield(2)); it returns at once when there are none. The call is
// raw: it does not block, and an entersyscall would let the scheduler's
// monitor hand the P to another thread if the yield lasts.
func yieldThread() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
