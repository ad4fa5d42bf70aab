package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A UDP link's sockets are kept out of the Go netpoller.
//
// A socket in the netpoller's epoll set costs a thread wake-up per packet
// whenever the process has an idle thread waiting in epoll_wait, which a
// Go process nearly always has (any pending timer or network wait puts
// one there): the kernel wakes it for every datagram that arrives and,
// through sock_wfree's write-space wake-up, for every one sent, and the
// sender's system call pays for the wake-up (an inter-processor interrupt,
// a VM exit on a virtual machine). Measured here, that doubles the
// latency of two busy-polling UDP endpoints, from ≈ 3.5–4.3 to ≈ 6.5–7 µs
// one way. A busy poller never needs those wake-ups.
//
// So each socket is a plain non-blocking descriptor that only the link's
// own waits watch: a read or write that would block waits in ppoll(2), on
// its own thread, for the socket or for one of the link's eventfds. With
// nobody waiting (the reader parked while a goroutine busy-polls), a
// datagram wakes no thread at all. The cost is a thread per blocked wait
// instead of a parked goroutine, which a link has at most two of (its
// reader, and a writer waiting for buffer space).

// errInterrupted ends a read that Interrupt woke.
var errInterrupted = errors.New("link: read interrupted")

// sockSet is what a link's sockets share: the eventfds that end their
// waits, and the lock that keeps a descriptor open while a call uses it.
type sockSet struct {
	// ops is held shared by every system call on the sockets, and
	// exclusively by close, so that no call ever reaches a descriptor
	// number that close has released (and the process may have reused).
	ops    sync.RWMutex
	closed atomic.Bool
	done   int // eventfd, written once by close: every wait ends
	intr   int // eventfd, written by interrupt: the reader's wait ends
}

func newSockSet() (*sockSet, error) {
	done, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	intr, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(done)
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &sockSet{done: done, intr: intr}, nil
}

// interrupt ends the reader's current or next wait with errInterrupted.
func (s *sockSet) interrupt() { signal(s.intr) }

// clearInterrupt consumes an interrupt that no wait has seen.
func (s *sockSet) clearInterrupt() {
	var b [8]byte
	unix.Read(s.intr, b[:])
}

// close ends every wait, waits for the calls in progress and closes the
// descriptors. Sockets are closed by the caller's fn, under the lock.
func (s *sockSet) close(fn func()) {
	if s.closed.Swap(true) {
		return
	}
	signal(s.done)
	s.ops.Lock()
	fn()
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
	fd  int
	set *sockSet
}

// Read calls f until it returns true, waiting for the socket to become
// readable in between. A wait ends early with errInterrupted after
// interrupt, and with net.ErrClosed after close.
func (s *sockFD) Read(f func(fd uintptr) bool) error { return s.do(f, unix.POLLIN, s.set.intr) }

// Write calls f until it returns true, waiting for the socket to become
// writable in between.
func (s *sockFD) Write(f func(fd uintptr) bool) error { return s.do(f, unix.POLLOUT, -1) }

func (s *sockFD) do(f func(fd uintptr) bool, events int16, intr int) error {
	s.set.ops.RLock()
	defer s.set.ops.RUnlock()
	for {
		if s.set.closed.Load() {
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			return nil
		}
		if err := s.wait(events, intr); err != nil {
			return err
		}
	}
}

// wait blocks in ppoll until the socket has one of events, the link
// closes or (intr ≥ 0) an interrupt comes.
func (s *sockFD) wait(events int16, intr int) error {
	fds := [3]unix.PollFd{
		{Fd: int32(s.fd), Events: events},
		{Fd: int32(s.set.done), Events: unix.POLLIN},
		{Fd: int32(intr), Events: unix.POLLIN}, // a negative Fd is ignored
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
	switch {
	case fds[1].Revents != 0:
		return net.ErrClosed
	case fds[2].Revents != 0:
		s.set.clearInterrupt()
		return errInterrupted
	}
	return nil
}

// openSocket opens a non-blocking UDP socket with options o, bound to a
// (scope: an IPv6 link-local address's interface index).
func openSocket(a netip.AddrPort, scope uint32, o sockOpts, set *sockSet) (*sockFD, netip.AddrPort, error) {
	// Each sockaddr is built only for its family: As4 panics on an IPv6
	// address.
	family := unix.AF_INET6
	var sa unix.Sockaddr
	if o.is6 {
		sa = &unix.SockaddrInet6{Port: int(a.Port()), Addr: a.Addr().As16(), ZoneId: scope}
	} else {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(a.Port()), Addr: a.Addr().Unmap().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
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
	return &sockFD{fd: fd, set: set}, la, nil
}
