//go:build linux

package targets

import (
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"github.com/goroce/goroce/tools/perf/internal/udpping"
)

// floorTimeout bounds each wait of a floor end for its peer's message.
const floorTimeout = 10 * time.Second

// floorEnd runs End's UDP ends, the kernel's floor under goroce's 2-byte
// latency (internal/udpping): goroce's ping-pong datagram between two
// bare processes.
//
//	udp-echo ADDR N                  bind ADDR, print "port N", answer N messages of the first peer
//	udp-ping LOCAL SERVER:PORT N     ping-pong N messages, print "t_typical X" (µs, one way)
func floorEnd(args []string, stdout io.Writer) error {
	n, err := strconv.Atoi(args[len(args)-1])
	if err != nil || n < 1 {
		return fmt.Errorf("count %q: want a positive number", args[len(args)-1])
	}
	runtime.LockOSThread() // the end spins on its socket, as goroce's poller does
	switch {
	case args[0] == "udp-echo" && len(args) == 3:
		a, err := netip.ParseAddr(args[1])
		if err != nil {
			return err
		}
		c, err := udpping.Listen(netip.AddrPortFrom(a, 0), 2)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := fmt.Fprintf(stdout, "port %d\n", c.Port()); err != nil {
			return err
		}
		return c.Serve(n, floorTimeout)
	case args[0] == "udp-ping" && len(args) == 4:
		local, err1 := netip.ParseAddr(args[1])
		server, err2 := netip.ParseAddrPort(args[2])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("addresses %q and %q: want LOCAL and SERVER:PORT", args[1], args[2])
		}
		c, err := udpping.Dial(netip.AddrPortFrom(local, 0), server, 2)
		if err != nil {
			return err
		}
		defer c.Close()
		oneWay, err := c.Ping(n, floorTimeout)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "t_typical %.3f\n", udpping.Typical(oneWay))
		return err
	}
	return errEndArgs
}
