//go:build linux

package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/netns"
)

// The UDP ceiling: what the kernel's UDP path itself moves between the two
// addresses when it is used at its best, with nothing of RDMA on top. A
// RoCEv2 sender over UDP sockets can at most approach it; on machines
// where it is little above TCP, so is goroce (docs/PERFORMANCE.md).
const (
	ceilingSegment = 4096 + 12 + 4 // a WRITE_MIDDLE packet at MTU 4096: payload, BTH, ICRC
	ceilingSegs    = 15            // as many as fit in one 65,507-byte UDP_SEGMENT super-packet
	ceilingBuf     = 4 << 20       // socket buffers, as goroce's link asks for
	ceilingWindow  = 1 << 20       // bytes sent and not yet received (docs/design/tuning.md#ceiling-window)
)

// udpCeiling sends at least n bytes from cfg.Client to cfg.Server as runs
// of 15 equal 4112-byte datagrams, each run one UDP_SEGMENT (GSO)
// super-packet per sendmsg, received with UDP_GRO, one recvmsg per
// super-packet: no transport, no ICRC, no copies but the kernel's, and at
// most ceilingWindow bytes in flight. It returns the MiB/s delivered, from
// the first send to the last byte received, and the fraction of the bytes
// sent that the receiver's socket dropped.
func udpCeiling(cfg Config, n int64) (mibps, lost float64, err error) {
	rfd, raddr, err := ceilingSocket(cfg.ServerNS, cfg.Server.As4(), unix.SO_RCVBUF)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(rfd)
	if err := unix.SetsockoptInt(rfd, unix.IPPROTO_UDP, unix.UDP_GRO, 1); err != nil {
		return 0, 0, fmt.Errorf("UDP_GRO: %w", err)
	}
	// A receiver that hears nothing for this long after the sender's
	// last super-packet counts the rest as dropped.
	if err := unix.SetsockoptTimeval(rfd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100_000}); err != nil {
		return 0, 0, err
	}
	sfd, _, err := ceilingSocket(cfg.ClientNS, cfg.Client.As4(), unix.SO_SNDBUF)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(sfd)

	run := make([]byte, ceilingSegment*ceilingSegs)
	oob := make([]byte, unix.CmsgSpace(2)) // the segment size, for UDP_SEGMENT
	c := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	c.Level, c.Type = unix.IPPROTO_UDP, unix.UDP_SEGMENT
	c.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], ceilingSegment)
	runs := (n + int64(len(run)) - 1) / int64(len(run))

	// The sender keeps at most ceilingWindow bytes unread, as an RDMA
	// sender keeps its window: told by the receiver directly, in memory,
	// the cheapest acknowledgement there is. Unpaced, the sender outruns
	// the receiver, whose socket drops what its buffer cannot hold.
	var rcvd atomic.Int64
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var sendErr error
	start := time.Now()
	wg.Go(func() {
		for i := range runs {
			for i*int64(len(run))-rcvd.Load() > ceilingWindow {
				select {
				case <-wake:
				case <-done:
					return
				}
			}
			if _, err := unix.SendmsgN(sfd, run, oob, raddr, 0); err != nil {
				sendErr = fmt.Errorf("sendmsg: %w", err)
				return
			}
		}
	})
	buf := make([]byte, 1<<16)
	roob := make([]byte, unix.CmsgSpace(2))
	var got int64
	last := start
	for got < runs*int64(len(run)) {
		k, _, _, _, err := unix.Recvmsg(rfd, buf, roob, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			break // the rest was dropped
		}
		if err != nil {
			close(done)
			wg.Wait()
			return 0, 0, fmt.Errorf("recvmsg: %w", err)
		}
		got += int64(k)
		rcvd.Store(got)
		select {
		case wake <- struct{}{}:
		default:
		}
		last = time.Now()
	}
	close(done)
	wg.Wait()
	if sendErr != nil {
		return 0, 0, sendErr
	}
	sent := runs * int64(len(run))
	return float64(got) / last.Sub(start).Seconds() / (1 << 20), float64(sent-got) / float64(sent), nil
}

// ceilingSocket opens a blocking UDP socket in namespace ns, bound to
// addr's port 0 with buffer opt (SO_RCVBUF or SO_SNDBUF) set, and returns
// it with its address.
func ceilingSocket(ns *netns.NS, addr [4]byte, opt int) (int, *unix.SockaddrInet4, error) {
	var fd int
	err := ns.Do(func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err != nil {
		return -1, nil, err
	}
	// Past net.core.rmem_max and wmem_max where allowed (CAP_NET_ADMIN),
	// as goroce's link sets its own.
	force := map[int]int{unix.SO_RCVBUF: unix.SO_RCVBUFFORCE, unix.SO_SNDBUF: unix.SO_SNDBUFFORCE}[opt]
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, ceilingBuf) != nil {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, ceilingBuf); err != nil {
			unix.Close(fd)
			return -1, nil, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: addr}); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, sa.(*unix.SockaddrInet4), nil
}
