package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/internal/link"

	"golang.org/x/sys/unix"
)

// A UDP link's sockets are kept out of the Go netpoller's epoll set.
//
// A socket in that set costs a thread wake-up per packet whenever the
// process has an idle thread waiting in epoll_wait, which a Go process
// nearly always has (any pending timer or network wait puts one there):
// the kernel wakes it for every datagram that arrives and, through
// sock_wfree's write-space wake-up, for every one sent, and the sender's
// system call pays for the wake-up (an inter-processor interrupt, a VM
// exit on a virtual machine); a busy poller needs none of those wake-ups
// (docs/design/tuning.md#own-epoll-set).
//
// So the link has an epoll set of its own, which the Go netpoller watches
// in the socket's place. The reader's socket is in it, for EPOLLIN only,
// while the reader waits; when a busy poller takes over (Interrupt) the
// socket leaves it, and from then on a datagram wakes no thread at all.
// The set also holds an eventfd that Interrupt writes and what the link's
// owner watches (Link.Watch: the same-host rings' doorbells).
//
// A writer that finds the socket buffer full, which loopback hardly ever
// does, waits in ppoll(2) on its own thread. The reader does not: a
// goroutine blocked in a system call keeps its P until sysmon takes it
// back, and a reader that waited in ppoll left the application's goroutine
// runnable but not running for half of a one-process benchmark.

// errInterrupted ends a read that Interrupt woke; errWoken one that a
// watched descriptor woke (sockSet.wake: a new flow socket, the same-host
// rings).
var (
	errInterrupted = errors.New("link: read interrupted")
	errWoken       = link.ErrWoken
)

// sockSet is what a link's sockets share: the epoll set the reader waits
// on, the eventfds that end waits, and the lock that keeps a descriptor
// open while a call uses it.
type sockSet struct {
	// ops is held shared by every system call on the sockets, and
	// exclusively by close, so that no call ever reaches a descriptor
	// number that close has released (and the process may have reused).
	ops    sync.RWMutex
	closed atomic.Bool
	done   int // eventfd, written once by close: every ppoll ends

	ep     *os.File        // the epoll set, in the Go netpoller
	epfd   int             // ep's descriptor (os.File.Fd would make it blocking)
	epRC   syscall.RawConn // ep's, to wait on it
	intr   int             // eventfd in ep, written by interrupt
	intrOn atomic.Bool     // interrupt was called and no read has returned for it

	// wake, if set, is asked whenever the reader's wait is woken by
	// something other than its socket (a descriptor Link.Watch added to
	// ep): true ends the wait with errWoken. It runs on the reader's
	// goroutine.
	wake func() bool
}

func newSockSet() (s *sockSet, err error) {
	s = &sockSet{done: -1, intr: -1}
	epfd := -1
	defer func() {
		if err != nil {
			for _, fd := range []int{s.done, s.intr, epfd} {
				if fd >= 0 {
					unix.Close(fd)
				}
			}
		}
	}()
	if s.done, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	if s.intr, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	if epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err = unix.SetNonblock(epfd, true); err != nil { // so that os.NewFile puts it in the netpoller
		return nil, os.NewSyscallError("fcntl", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.intr)}
	if err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, s.intr, &ev); err != nil {
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	s.ep, s.epfd = os.NewFile(uintptr(epfd), "goroce-epoll"), epfd
	epfd = -1 // s.ep owns it
	if s.epRC, err = s.ep.SyscallConn(); err != nil {
		s.ep.Close()
		return nil, err
	}
	return s, nil
}

// interrupt ends the reader's current or next wait with errInterrupted.
func (s *sockSet) interrupt() {
	s.intrOn.Store(true)
	signal(s.intr)
}

// takeInterrupt reports whether an interrupt is pending, and consumes it.
func (s *sockSet) takeInterrupt() bool {
	if !s.intrOn.Swap(false) {
		return false
	}
	var b [8]byte
	unix.Read(s.intr, b[:])
	return true
}

// close ends every wait, runs quiesce (if not nil) once the waits have
// been told to end, waits for the calls in progress and closes the
// descriptors. Sockets are closed by the caller's fn, under the lock.
func (s *sockSet) close(quiesce, fn func()) {
	if s.closed.Swap(true) {
		return
	}
	signal(s.done) // writers waiting in ppoll return
	signal(s.intr) // and so does a reader waiting in the netpoller
	if quiesce != nil {
		quiesce()
	}
	s.ops.Lock()
	fn()
	s.ep.Close()
	unix.Close(s.done)
	unix.Close(s.intr)
	s.ops.Unlock()
}

func signal(efd int) {
	one := [8]byte{1}
	unix.Write(efd, one[:])
}

// sockFD is one socket of a link. Read and Write have the contract of
// syscall.RawConn's: f is called with the descriptor and returns false to
// wait until the socket is ready and be called again.
type sockFD struct {
	fd      int
	set     *sockSet
	watched bool // fd is in set.ep; only the (one) reader changes it
	// with, if not nil, is watched and unwatched with this socket, and a
	// wait in Read tries it too: the link's flow socket, with the bound
	// one (flowsock_linux.go). gotWith says the last Read's f succeeded
	// on it.
	with    *sockFD
	gotWith bool

	// A wait in Read: waitF (waitStep, bound once, so that a wait
	// allocates nothing) calls inner, Read's f, and notes why it stopped.
	waitF              func(uintptr) bool
	inner              func(uintptr) bool
	interrupted, woken bool
}

func newSockFD(fd int, set *sockSet) *sockFD {
	s := &sockFD{fd: fd, set: set}
	s.waitF = s.waitStep
	return s
}

// Read calls f until it returns true, waiting in the link's epoll set for
// the socket to become readable in between. The wait ends early with
// errInterrupted after interrupt, which also takes the socket out of the
// set, and with net.ErrClosed after close. Reads are serialized by the
// caller.
func (s *sockFD) Read(f func(fd uintptr) bool) error {
	set := s.set
	set.ops.RLock()
	defer set.ops.RUnlock()
	if set.closed.Load() {
		return net.ErrClosed
	}
	s.gotWith = false
	if f(uintptr(s.fd)) {
		return nil
	}
	if set.takeInterrupt() {
		return s.unwatch()
	}
	if err := s.watch(); err != nil {
		return err
	}
	if s.with != nil {
		if err := s.with.watch(); err != nil {
			return err
		}
	}
	s.inner, s.interrupted, s.woken = f, false, false
	err := set.epRC.Read(s.waitF)
	s.inner = nil
	switch {
	case set.closed.Load():
		return net.ErrClosed
	case err != nil:
		return err
	case s.interrupted:
		return s.unwatch()
	case s.woken:
		return errWoken
	}
	return nil
}

// waitStep is what the netpoller runs each time the link's epoll set is
// ready during a Read: it stops the wait on close, interrupt or a
// same-host wake, and otherwise tries the socket and the one with it.
func (s *sockFD) waitStep(uintptr) bool {
	set := s.set
	if set.closed.Load() || set.takeInterrupt() {
		s.interrupted = true
		return true
	}
	if set.wake != nil && set.wake() {
		s.woken = true
		return true
	}
	if s.inner(uintptr(s.fd)) {
		return true
	}
	if w := s.with; w != nil && s.inner(uintptr(w.fd)) {
		s.gotWith = true
		return true
	}
	return false
}

// watch puts the socket into the link's epoll set (for reading), if it
// is not there.
func (s *sockFD) watch() error {
	if s.watched {
		return nil
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
	if err := unix.EpollCtl(s.set.epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		return os.NewSyscallError("epoll_ctl", err)
	}
	s.watched = true
	return nil
}

// unwatch takes the socket out of the epoll set, for a busy poller, and
// returns errInterrupted.
func (s *sockFD) unwatch() error {
	if s.with != nil {
		s.with.unwatch()
	}
	if s.watched {
		s.watched = false
		if err := unix.EpollCtl(s.set.epfd, unix.EPOLL_CTL_DEL, s.fd, nil); err != nil {
			return os.NewSyscallError("epoll_ctl", err)
		}
	}
	return errInterrupted
}

// Write calls f until it returns true, waiting in ppoll for the socket to
// become writable in between.
func (s *sockFD) Write(f func(fd uintptr) bool) error {
	s.set.ops.RLock()
	defer s.set.ops.RUnlock()
	for {
		if s.set.closed.Load() {
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		if err := s.waitWritable(); err != nil {
			return err
		}
	}
}

// waitWritable blocks in ppoll until the socket can be written or the
// link closes.
func (s *sockFD) waitWritable() error {
	fds := [2]unix.PollFd{
		{Fd: int32(s.fd), Events: unix.POLLOUT},
		{Fd: int32(s.set.done), Events: unix.POLLIN},
	}
	for {
		_, err := unix.Ppoll(fds[:], nil, nil)
		if err == nil {
			break
		}
		if err != unix.EINTR {
			return os.NewSyscallError("ppoll", err)
		}
	}
	if fds[1].Revents != 0 {
		return net.ErrClosed
	}
	return nil
}

// sockaddr returns a as a socket address of its family (an IPv4-mapped
// address as IPv4); scope is an IPv6 link-local address's interface
// index. Each is built only for its family: As4 panics on an IPv6
// address.
func sockaddr(a netip.AddrPort, scope uint32) unix.Sockaddr {
	if ip := a.Addr().Unmap(); ip.Is4() {
		return &unix.SockaddrInet4{Port: int(a.Port()), Addr: ip.As4()}
	}
	return &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16(), ZoneId: scope}
}

// openSocket opens a non-blocking UDP socket with options o, bound to a
// (scope: an IPv6 link-local address's interface index).
func openSocket(a netip.AddrPort, scope uint32, o sockOpts, set *sockSet) (*sockFD, netip.AddrPort, error) {
	family := unix.AF_INET6
	if !o.is6 {
		family = unix.AF_INET
	}
	sa := sockaddr(a, scope)
	var fd int
	err := o.ns.Do(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		return err
	})
	if err != nil {
		return nil, netip.AddrPort{}, os.NewSyscallError("socket", err)
	}
	if err := o.apply(fd); err != nil {
		unix.Close(fd)
		return nil, netip.AddrPort{}, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, netip.AddrPort{}, fmt.Errorf("bind: %w", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, netip.AddrPort{}, os.NewSyscallError("getsockname", err)
	}
	var la netip.AddrPort
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		la = netip.AddrPortFrom(netip.AddrFrom4(b.Addr), uint16(b.Port))
	case *unix.SockaddrInet6:
		la = netip.AddrPortFrom(netip.AddrFrom16(b.Addr), uint16(b.Port))
	}
	return newSockFD(fd, set), la, nil
}
