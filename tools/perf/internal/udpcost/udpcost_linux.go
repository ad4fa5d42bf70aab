//go:build linux

// Package udpcost measures what the kernel's UDP path costs a sender on
// this machine: the sending thread's CPU time per datagram and per GiB,
// sending over loopback (127.0.0.2 to 127.0.0.1) to a reader that spins on
// its socket, with nothing of RDMA on top: on a machine whose kernel
// charges microseconds per datagram, the number of datagrams, not of
// bytes, decides what goroce's UDP path can move.
//
//	go run ./tools/perf udpcost -size 1024                  # plain 1 KiB datagrams, 16 per sendmmsg
//	go run ./tools/perf udpcost -size 1024 -connect         # the same from a connected socket
//	go run ./tools/perf udpcost -size 4112 -gso 15 -first -per 1   # 64 KiB WRITEs as goroce sends them
//	go run ./tools/perf udpcost -size 4112 -gso 15 -first -per 1 -socks 256   # one socket per QP
//
// -gso N sends each message as a UDP_SEGMENT super-packet of N segments of
// -size bytes; -first puts a datagram 16 bytes longer before it (a
// WRITE_FIRST, whose RETH keeps it out of the run). Compare runs
// alternately: the figures of one run move with the machine's load.
package udpcost

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// config is what to send.
type config struct {
	size    int           // bytes per datagram or GSO segment
	gso     int           // segments per super-packet; 1 sends plain datagrams
	first   bool          // each message starts with a lone datagram of size+16 bytes
	per     int           // messages per sendmmsg
	socks   int           // sending sockets, taking turns call by call
	connect bool          // connect the sending sockets to the reader
	ipv6    bool          // send over IPv6 (::1 to ::1) instead of IPv4
	dur     time.Duration // how long to send
}

// result is what a run measured.
type result struct {
	datagrams, calls uint64        // datagrams (super-packets count once) and sendmmsg calls that sent
	bytes            uint64        // UDP payload bytes sent
	received         uint64        // bytes the reader got
	full             uint64        // calls refused for a full socket buffer (EAGAIN, ENOBUFS)
	elapsed, cpu     time.Duration // wall time, and the sending thread's CPU time
}

// Main runs udpcost with the command-line arguments args and returns its
// exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("udpcost", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.IntVar(&c.size, "size", 1024, "bytes per datagram, or per segment with -gso")
	fs.IntVar(&c.gso, "gso", 1, "segments per UDP_SEGMENT super-packet (1: plain datagrams)")
	fs.BoolVar(&c.first, "first", false, "start each message with a datagram 16 bytes longer than -size, sent alone (a WRITE_FIRST)")
	fs.IntVar(&c.per, "per", 16, "messages per sendmmsg")
	fs.IntVar(&c.socks, "socks", 1, "sending sockets, taking turns call by call")
	fs.BoolVar(&c.connect, "connect", false, "connect the sending sockets (the kernel then keeps their route)")
	fs.BoolVar(&c.ipv6, "6", false, "send over IPv6, ::1 to ::1, instead of 127.0.0.2 to 127.0.0.1")
	fs.DurationVar(&c.dur, "t", 2*time.Second, "how long to send")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf udpcost [-size N] [-gso N] [-first] [-per N] [-socks N] [-connect] [-6] [-t DURATION]")
		fmt.Fprintln(stderr, "\nMeasures the sending thread's CPU time per datagram and per GiB over loopback, with nothing of RDMA on top.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "udpcost: unexpected arguments %q\n", fs.Args())
		return 2
	}
	r, err := run(c)
	if err != nil {
		fmt.Fprintln(stderr, "udpcost:", err)
		return 1
	}
	gib := float64(r.bytes) / (1 << 30)
	fmt.Fprintf(stdout, "size %d gso %d first %v per %d socks %d connect %v ipv6 %v: %.0f MiB/s, %.0f k datagrams/s, %.1f datagrams per call\n",
		c.size, c.gso, c.first, c.per, c.socks, c.connect, c.ipv6,
		float64(r.bytes)/r.elapsed.Seconds()/(1<<20), float64(r.datagrams)/r.elapsed.Seconds()/1e3, float64(r.datagrams)/float64(max(r.calls, 1)))
	fmt.Fprintf(stdout, "sender CPU: %.2f us per datagram, %.3f s per GiB; reader got %.1f%% of the bytes; %d calls found the buffer full\n",
		r.cpu.Seconds()*1e6/float64(max(r.datagrams, 1)), r.cpu.Seconds()/max(gib, 1e-9), 100*float64(r.received)/float64(max(r.bytes, 1)), r.full)
	return 0
}

// mmsghdr is struct mmsghdr of <sys/socket.h>.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// run sends as c says for c.dur and measures it.
func run(c config) (result, error) {
	var r result
	if c.size < 1 || c.gso < 1 || c.per < 1 || c.socks < 1 || c.dur <= 0 {
		return r, errors.New("size, gso, per, socks and t must be positive")
	}
	fam := newFamily(c.ipv6)
	if c.gso > 1 && c.size*c.gso > fam.maxPayload {
		return r, fmt.Errorf("a super-packet of %d × %d bytes is larger than a UDP datagram (%d bytes)", c.gso, c.size, fam.maxPayload)
	}
	rfd, dst, err := fam.listen()
	if err != nil {
		return r, err
	}
	defer unix.Close(rfd)
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range c.socks {
		fd, err := unix.Socket(fam.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return r, err
		}
		fds = append(fds, fd)
		if err := unix.Bind(fd, fam.send); err != nil {
			return r, fmt.Errorf("bind %s: %w", fam.sendName, err)
		}
		if c.connect {
			if err := unix.Connect(fd, dst); err != nil {
				return r, fmt.Errorf("connect: %w", err)
			}
		}
	}

	// The reader spins on its own thread until the sender is done.
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		buf := make([]byte, 1<<16)
		for !stop.Load() {
			if n, _, err := unix.Recvfrom(rfd, buf, unix.MSG_DONTWAIT); err == nil {
				r.received += uint64(n)
			}
		}
	}()

	// The messages: [first] run, per times, each a message header of its own.
	firstBuf := make([]byte, c.size+16)
	runBuf := make([]byte, c.size*c.gso)
	name, namelen := fam.raw(dst)
	cmsg := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&cmsg[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&cmsg[unix.CmsgLen(0)])) = uint16(c.size)
	var iovs []unix.Iovec
	var lens []int
	for range c.per {
		if c.first {
			iovs = append(iovs, unix.Iovec{Base: &firstBuf[0]})
			lens = append(lens, len(firstBuf))
		}
		iovs = append(iovs, unix.Iovec{Base: &runBuf[0]})
		lens = append(lens, len(runBuf))
	}
	msgs := make([]mmsghdr, len(iovs))
	for i := range msgs {
		iovs[i].SetLen(lens[i])
		m := &msgs[i].hdr
		m.Iov = &iovs[i]
		m.SetIovlen(1)
		if !c.connect {
			m.Name, m.Namelen = name, namelen
		}
		if c.gso > 1 && lens[i] == len(runBuf) {
			m.Control = &cmsg[0]
			m.SetControllen(len(cmsg))
		}
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(unix.RUSAGE_THREAD, &ru0)
	start := time.Now()
	for i := 0; time.Since(start) < c.dur; i++ {
		fd := fds[i%len(fds)]
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), uintptr(len(msgs)), unix.MSG_DONTWAIT, 0, 0)
		switch errno {
		case 0:
			r.calls++
			r.datagrams += uint64(n)
			for k := range int(n) {
				r.bytes += uint64(lens[k])
			}
		case unix.EAGAIN, unix.ENOBUFS:
			r.full++
			runtime.Gosched()
		default:
			stop.Store(true)
			wg.Wait()
			return r, fmt.Errorf("sendmmsg: %w", errno)
		}
	}
	r.elapsed = time.Since(start)
	syscall.Getrusage(unix.RUSAGE_THREAD, &ru1)
	r.cpu = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	time.Sleep(10 * time.Millisecond) // let the reader take what is queued
	stop.Store(true)
	wg.Wait()
	return r, nil
}

// family is what differs between sending over IPv4 and over IPv6.
type family struct {
	domain           int
	send, recv       unix.Sockaddr // the sending and the reading socket's address, port 0
	sendName, recvIP string
	maxPayload       int // the largest UDP payload: 65535 less the UDP header, and the IPv4 header
}

func newFamily(ipv6 bool) family {
	if ipv6 {
		lo := unix.SockaddrInet6{Addr: [16]byte{15: 1}}
		return family{unix.AF_INET6, &lo, &unix.SockaddrInet6{Addr: lo.Addr}, "[::1]", "[::1]", 65535 - 8}
	}
	return family{unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 2}}, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}, "127.0.0.2", "127.0.0.1", 65535 - 20 - 8}
}

// raw returns dst as a struct sockaddr for a message header.
func (f family) raw(dst unix.Sockaddr) (*byte, uint32) {
	switch a := dst.(type) {
	case *unix.SockaddrInet6:
		sa := &unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: a.Addr}
		port := (*[2]byte)(unsafe.Pointer(&sa.Port))
		port[0], port[1] = byte(a.Port>>8), byte(a.Port)
		return (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet6
	case *unix.SockaddrInet4:
		sa := &unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.Addr}
		port := (*[2]byte)(unsafe.Pointer(&sa.Port))
		port[0], port[1] = byte(a.Port>>8), byte(a.Port)
		return (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet4
	}
	panic("udpcost: not an IP address")
}

// listen opens the reader's socket, receiving super-packets whole
// (UDP_GRO) into an 8 MiB buffer, and returns it with its address.
func (f family) listen() (int, unix.Sockaddr, error) {
	fd, err := unix.Socket(f.domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) != nil {
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	}
	if err := unix.Bind(fd, f.recv); err != nil {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("bind %s: %w", f.recvIP, err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, sa, nil
}
