package targets

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/perftest"
)

// End runs one end of a measurement between two processes (Run), in
// the process a Config.Command started, and returns its exit
// status. args are one of:
//
//	perftest TOOL ARGS...                 a perftest tool, as its own command runs (perftest.Main)
//	tcp-sink ADDR                         listen on ADDR, print "port N", read one connection to its end
//	tcp-source LOCAL SERVER:PORT SIZE N   send N bytes in SIZE-byte writes, wait for the sink to close, print "MiB/s X"
//	tcp-echo ADDR SIZE                    listen on ADDR, print "port N", echo SIZE-byte messages of one connection
//	tcp-ping LOCAL SERVER:PORT SIZE N     ping-pong N SIZE-byte messages, print "t_typical X" (µs, one way)
//	tcp-spin-echo, tcp-spin-ping          tcp-echo and tcp-ping whose reads poll the socket, never blocking
//	udp-echo ADDR N                       bind ADDR, print "port N", answer N ping-pong datagrams of the first peer
//	udp-ping LOCAL SERVER:PORT N          ping-pong N datagrams, print "t_typical X" (µs, one way)
//
// The TCP ends are the comparison's: one Go TCP stream, or one ping-pong,
// between two processes, as goroce's two tools run. The spinning
// ping-pong is the like-for-like reference for goroce's busy-poll
// latency (spinningReads). The UDP ends ping-pong goroce's own datagram
// with nothing of RDMA on top (internal/udpping): the kernel's floor
// under goroce's latency over UDP.
func End(args []string, stdout, stderr io.Writer) int {
	if len(args) >= 2 && args[0] == "perftest" {
		t, ok := perftest.Tools[args[1]]
		if !ok {
			fmt.Fprintf(stderr, "perf end: no perftest tool %q\n", args[1])
			return 2
		}
		return perftest.Main(t, args[2:], stdout, stderr)
	}
	end := tcpEnd
	if len(args) > 0 && strings.HasPrefix(args[0], "udp-") {
		end = floorEnd
	}
	if err := end(args, stdout); err != nil {
		fmt.Fprintf(stderr, "perf end %s: %v\n", strings.Join(args, " "), err)
		return 1
	}
	return 0
}

// errEndArgs reports arguments End does not know.
var errEndArgs = errors.New("want perftest TOOL ARGS, tcp-sink ADDR, tcp-source LOCAL SERVER:PORT SIZE N, tcp-[spin-]echo ADDR SIZE, tcp-[spin-]ping LOCAL SERVER:PORT SIZE N, udp-echo ADDR N or udp-ping LOCAL SERVER:PORT N")

// tcpEnd runs one of End's TCP ends.
func tcpEnd(args []string, stdout io.Writer) error {
	if len(args) < 2 {
		return errEndArgs
	}
	// reads makes an echo's or a ping's reader: one that polls for the
	// spin- ends, one that blocks for the others.
	kind, spin := strings.CutPrefix(args[0], "tcp-spin-")
	reads := func(c net.Conn) (bench.ReadFull, error) {
		if spin {
			return spinningReads(c)
		}
		return bench.BlockingReads(c), nil
	}
	if spin {
		if kind != "echo" && kind != "ping" {
			return errEndArgs
		}
		args = append([]string{"tcp-" + kind}, args[1:]...)
	}
	switch {
	case args[0] == "tcp-sink" && len(args) == 2:
		return serveOne(args[1], stdout, func(c net.Conn) error {
			bench.Sink(c)
			return nil
		})
	case args[0] == "tcp-echo" && len(args) == 3:
		size, err := strconv.Atoi(args[2])
		if err != nil || size < 1 {
			return fmt.Errorf("size %q: want a positive number", args[2])
		}
		return serveOne(args[1], stdout, func(c net.Conn) error {
			read, err := reads(c)
			if err != nil {
				return err
			}
			bench.Echo(c, read, size)
			return nil
		})
	case (args[0] == "tcp-source" || args[0] == "tcp-ping") && len(args) == 5:
		size, err1 := strconv.Atoi(args[3])
		n, err2 := strconv.ParseInt(args[4], 10, 64)
		if err := errors.Join(err1, err2); err != nil || size < 1 || n < 1 {
			return fmt.Errorf("size %q and count %q: want positive numbers", args[3], args[4])
		}
		local, err := netip.ParseAddr(args[1])
		if err != nil {
			return err
		}
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: local.AsSlice()}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", args[2])
		if err != nil {
			return err
		}
		defer c.Close()
		if args[0] == "tcp-ping" {
			read, err := reads(c)
			if err != nil {
				return err
			}
			typical, err := bench.PingPong(c, read, size, int(n))
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(stdout, "t_typical %.3f\n", typical)
			return err
		}
		start := time.Now()
		if err := bench.Send(c, size, n, time.Time{}); err != nil {
			return err
		}
		// The sink closes once it has read everything: the stream's time
		// runs from the first write to the last byte read, as a perftest
		// client's from its first post to its last completion.
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			return fmt.Errorf("waiting for the sink to close: %v", err)
		}
		_, err = fmt.Fprintf(stdout, "MiB/s %.3f\n", float64(n)/time.Since(start).Seconds()/(1<<20))
		return err
	}
	return errEndArgs
}

// serveOne listens on addr, port 0, prints "port N", and hands the first
// connection to f.
func serveOne(addr string, stdout io.Writer, f func(net.Conn) error) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintf(stdout, "port %d\n", ln.Addr().(*net.TCPAddr).Port); err != nil {
		return err
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}
