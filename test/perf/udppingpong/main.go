//go:build linux

// Command udppingpong measures the kernel's floor under goroce's 2-byte
// latency: two ends ping-pong the datagram that carries an ib_write_lat
// message on the wire (internal/udpping), with nothing of RDMA on top, and
// print the median one-way time. goroce bench -targets measures the same
// between two processes in every round.
//
//	go run ./test/perf/udppingpong                  # both ends in one process, 127.0.0.1 and 127.0.0.2
//	go run ./test/perf/udppingpong -segments 1      # a lone 36-byte WRITE instead of the WRITE and its ACK
//	sudo ip netns exec A udppingpong -server -local 198.18.0.1 &
//	sudo ip netns exec B udppingpong -client -local 198.18.0.2 -peer 198.18.0.1   # across a veth, two processes
//
// Compare runs alternately: the figures of one run move with the machine.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/goroce/goroce/internal/udpping"
)

func main() {
	var (
		server   = flag.Bool("server", false, "answer a client started with -client (two processes)")
		client   = flag.Bool("client", false, "time a server started with -server (two processes)")
		local    = flag.String("local", "127.0.0.1", "this end's IPv4 address (the server's, in one process)")
		peer     = flag.String("peer", "127.0.0.2", "the server's IPv4 address for -client (the client's, in one process)")
		port     = flag.Int("port", 19790, "the server's UDP port, with -server and -client")
		segments = flag.Int("segments", 2, "2: a WRITE and its ACK as two GSO segments (56 bytes); 1: the WRITE alone (36 bytes)")
		n        = flag.Int("n", 50000, "round trips timed")
		timeout  = flag.Duration("timeout", 10*time.Second, "how long an end waits for a message")
		verbose  = flag.Bool("v", false, "print the percentiles too")
	)
	flag.Parse()
	la, err1 := netip.ParseAddr(*local)
	pa, err2 := netip.ParseAddr(*peer)
	if err := errors.Join(err1, err2); err != nil || *n < 1 || *port < 1 || *port > 65535 || *server && *client || flag.NArg() != 0 {
		if err != nil {
			fmt.Fprintln(os.Stderr, "udppingpong:", err)
		}
		flag.Usage()
		os.Exit(2)
	}
	var oneWay []time.Duration
	var err error
	switch {
	case *server:
		var c *udpping.Conn
		if c, err = udpping.Listen(netip.AddrPortFrom(la, uint16(*port)), *segments); err == nil {
			runtime.LockOSThread()
			err = c.Serve(*n, *timeout)
		}
	case *client:
		var c *udpping.Conn
		if c, err = udpping.Dial(netip.AddrPortFrom(la, 0), netip.AddrPortFrom(pa, uint16(*port)), *segments); err == nil {
			runtime.LockOSThread()
			oneWay, err = c.Ping(*n, *timeout)
		}
	default:
		oneWay, err = udpping.Pair(la, pa, *segments, *n, *timeout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if oneWay == nil {
		return
	}
	bytes := map[int]int{1: udpping.WriteLen, 2: udpping.WriteLen + udpping.AckLen}[*segments]
	fmt.Printf("%d bytes in %d segment(s), %d round trips: one way %.2f us (median)\n", bytes, *segments, *n, udpping.Typical(oneWay))
	if *verbose {
		at := func(q float64) float64 { return float64(oneWay[int(q*float64(len(oneWay)-1))]) / 1e3 }
		fmt.Printf("min %.2f  p1 %.2f  p99 %.2f  p99.9 %.2f  max %.2f us\n", at(0), at(0.01), at(0.99), at(0.999), at(1))
	}
}
