package device

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// yieldThread offers the calling thread's CPU to other runnable threads
// (sched_yield(2)); it returns at once when there are none. The call is
// raw: it does not block, and an entersyscall would let the scheduler's
// monitor hand the P to another thread if the yield lasts.
func yieldThread() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// moveThread moves the calling thread off the CPU it runs on, to another
// one it may run on, and reports whether it did: it takes the CPU out of
// the thread's affinity mask, which makes the kernel migrate the thread
// at once, and puts the mask back, which leaves it where it went.
func moveThread() bool {
	runtime.LockOSThread() // the three calls are about one thread
	defer runtime.UnlockOSThread()
	var mask unix.CPUSet
	if unix.SchedGetaffinity(0, &mask) != nil || mask.Count() < 2 {
		return false
	}
	var cpu uint32
	if _, _, e := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); e != 0 || !mask.IsSet(int(cpu)) {
		return false
	}
	others := mask
	others.Clear(int(cpu))
	if unix.SchedSetaffinity(0, &others) != nil {
		return false
	}
	unix.SchedSetaffinity(0, &mask)
	return true
}
