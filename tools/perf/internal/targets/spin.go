package targets

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/goroce/goroce/internal/bench"
)

// spinningReads reads c by polling its socket without ever blocking, as
// goroce's busy-poll mode (ib_write_lat's) polls its own: the reader never
// waits for a wake-up, so a ping-pong measures the network stack's path
// rather than the scheduler's. Between two processes whose readers block,
// each message also pays for waking an idle CPU, which on some VMs takes
// tens of microseconds. The reader's thread spins until the data arrives
// or the connection fails; the process is meant to do nothing else.
func spinningReads(c net.Conn) (bench.ReadFull, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no file descriptor to poll", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	return func(b []byte) error {
		var rerr error
		n := 0
		err := rc.Read(func(fd uintptr) bool {
			for n < len(b) && rerr == nil {
				m, err := syscall.Read(int(fd), b[n:])
				switch {
				case err == syscall.EAGAIN || err == syscall.EINTR:
				case err != nil:
					rerr = err
				case m == 0:
					rerr = io.ErrUnexpectedEOF
					if n == 0 {
						rerr = io.EOF
					}
				default:
					n += m
				}
			}
			return true
		})
		return errors.Join(err, rerr)
	}, nil
}
