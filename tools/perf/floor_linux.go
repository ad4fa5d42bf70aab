//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"runtime"
	"time"

	"github.com/goroce/goroce/tools/perf/internal/udpcost"
	"github.com/goroce/goroce/tools/perf/internal/udpping"
)

// runFloor is `perf floor`: the kernel's floor under goroce's 2-byte
// latency. Two ends ping-pong the datagram that carries an ib_write_lat
// message on the wire (internal/udpping), with nothing of RDMA on top,
// and it prints the median one-way time: both ends in this process, or
// one end each in two processes (-server, -client), across a veth pair
// when each runs in its namespace. Runs to compare go alternately: the
// figures of one run move with the machine.
func runFloor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	server := fs.Bool("server", false, "answer a client started with -client (two processes)")
	client := fs.Bool("client", false, "time a server started with -server (two processes)")
	local := fs.String("local", "127.0.0.1", "this end's IPv4 address (the server's, in one process)")
	peer := fs.String("peer", "127.0.0.2", "the server's IPv4 address for -client (the client's, in one process)")
	port := fs.Int("port", 19790, "the server's UDP port, with -server and -client")
	segments := fs.Int("segments", 2, "2: a WRITE and its ACK as two GSO segments (56 bytes); 1: the WRITE alone (36 bytes)")
	n := fs.Int("n", 50000, "round trips timed")
	timeout := fs.Duration("timeout", 10*time.Second, "how long an end waits for a message")
	verbose := fs.Bool("v", false, "print the percentiles too")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./tools/perf floor [-n N] [-segments 1|2] [-v] [-server | -client] [-local ADDR] [-peer ADDR] [-port N]")
		fmt.Fprintln(stderr, "\nPing-pongs goroce's 2-byte WRITE datagram between two bare UDP ends and prints the median one-way time:")
		fmt.Fprintln(stderr, "the kernel's floor under goroce's latency. Both ends in this process by default; across namespaces, e.g.")
		fmt.Fprintln(stderr, "  ip netns exec A perf floor -server -local 198.18.0.1 & ip netns exec B perf floor -client -local 198.18.0.2 -peer 198.18.0.1")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	la, err1 := netip.ParseAddr(*local)
	pa, err2 := netip.ParseAddr(*peer)
	if err := errors.Join(err1, err2); err != nil || *n < 1 || *port < 1 || *port > 65535 || *segments < 1 || *segments > 2 || *server && *client || fs.NArg() != 0 {
		if err != nil {
			fmt.Fprintln(stderr, "perf floor:", err)
		}
		fs.Usage()
		return 2
	}
	var oneWay []time.Duration
	var err error
	switch {
	case *server:
		var c *udpping.Conn
		if c, err = udpping.Listen(netip.AddrPortFrom(la, uint16(*port)), *segments); err == nil {
			defer c.Close()
			runtime.LockOSThread()
			err = c.Serve(*n, *timeout)
		}
	case *client:
		var c *udpping.Conn
		if c, err = udpping.Dial(netip.AddrPortFrom(la, 0), netip.AddrPortFrom(pa, uint16(*port)), *segments); err == nil {
			defer c.Close()
			runtime.LockOSThread()
			oneWay, err = c.Ping(*n, *timeout)
		}
	default:
		oneWay, err = udpping.Pair(la, pa, *segments, *n, *timeout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "perf floor:", err)
		return 1
	}
	if oneWay == nil {
		return 0
	}
	bytes := map[int]int{1: udpping.WriteLen, 2: udpping.WriteLen + udpping.AckLen}[*segments]
	fmt.Fprintf(stdout, "%d bytes in %d segment(s), %d round trips: one way %.2f us (median)\n", bytes, *segments, *n, udpping.Typical(oneWay))
	if *verbose {
		at := func(q float64) float64 { return float64(oneWay[int(q*float64(len(oneWay)-1))]) / 1e3 }
		fmt.Fprintf(stdout, "min %.2f  p1 %.2f  p99 %.2f  p99.9 %.2f  max %.2f us\n", at(0), at(0.01), at(0.99), at(0.999), at(1))
	}
	return 0
}

// runUDPCost is `perf udpcost`: what the kernel's UDP path costs a
// sender (internal/udpcost).
func runUDPCost(args []string, stdout, stderr io.Writer) int {
	return udpcost.Main(args, stdout, stderr)
}
