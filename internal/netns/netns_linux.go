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
		// The calling thread's, which runs goroutines and so is in the
		// process's namespace; /proc/self is the main thread's, which a
		// program may have moved.
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
	go n.enter(fn, errc)
	return <-errc
}

// enter locks its goroutine to a thread, enters the namespace there, runs
// fn and sends its error. The goroutine never unlocks that thread: when it
// returns, the runtime ends the thread instead of handing it to other
// goroutines. Not the main thread, though: the runtime cannot end that
// one and parks it for good, and a process whose main thread sits in
// another namespace sees that namespace through /proc/self (/proc/self/net
// and /proc/self/ns/net are the main thread's). On the main thread enter
// runs itself again on a new goroutine, which cannot get the main thread
// while this one holds it, waits for it, and lets the main thread go.
func (n *NS) enter(fn func() error, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		inner := make(chan error, 1)
		go n.enter(fn, inner)
		err := <-inner
		runtime.UnlockOSThread()
		errc <- err
		return
	}
	if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
		errc <- fmt.Errorf("netns: enter %s: %w", n.Name(), os.NewSyscallError("setns", err))
		return
	}
	errc <- fn()
}
