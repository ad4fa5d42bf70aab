package netns

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Open opens the network namespace that path names: /run/netns/NAME (what
// "ip netns add NAME" creates) or /proc/PID/ns/net.
func Open(path string) (*NS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	// NS_GET_NSTYPE (Linux 4.11) fails on anything but a namespace file.
	t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE)
	if err != nil || t != unix.CLONE_NEWNET {
		f.Close()
		return nil, fmt.Errorf("netns: %s is not a network namespace", path)
	}
	return &NS{f: f}, nil
}

// Inode returns the namespace's inode number, which identifies it; the nil
// NS's is the process's own.
func (n *NS) Inode() (uint64, error) {
	var st unix.Stat_t
	var err error
	if n == nil {
		// Not /proc/self: that is the main thread's, and a Do may have
		// left the main thread in another namespace (the runtime parks a
		// main thread whose goroutine exits locked instead of ending
		// it). Every thread that runs goroutines is in the process's own.
		runtime.LockOSThread()
		err = unix.Stat("/proc/thread-self/ns/net", &st)
		runtime.UnlockOSThread()
	} else {
		err = unix.Fstat(int(n.f.Fd()), &st)
	}
	if err != nil {
		return 0, fmt.Errorf("netns: %s: %w", n.Name(), err)
	}
	return st.Ino, nil
}

// Do runs fn on an OS thread inside the namespace and returns its error.
// The sockets fn creates belong to the namespace; fn must not create any
// from goroutines of its own, which run on other threads. A Dial to an IP
// address literal and a Listen are safe: package net makes their sockets
// on the calling goroutine.
func (n *NS) Do(fn func() error) error {
	if n == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		// The goroutine never unlocks its thread: when it returns, the
		// runtime ends the thread (or parks it for good, if it is the
		// main thread) instead of handing it to other goroutines.
		runtime.LockOSThread()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: enter %s: %w", n.Name(), os.NewSyscallError("setns", err))
			return
		}
		errc <- fn()
	}()
	return <-errc
}
