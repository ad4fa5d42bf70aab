package bench

import (
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/perftest"
)

// dialPair connects a TCP client on cfg.Client to a listener on
// cfg.Server, with Nagle off as latency tools set it.
func dialPair(cfg Config, ln net.Listener) (c, s net.Conn, err error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: cfg.Client.AsSlice()}, Timeout: 5 * time.Second}
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	err = cfg.ClientNS.Do(func() (err error) {
		c, err = d.Dial("tcp", ln.Addr().String())
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	if s = <-acc; s == nil {
		c.Close()
		return nil, nil, fmt.Errorf("accept failed")
	}
	return c, s, nil
}

// listenTCP listens on cfg.Server, port 0, in the server's namespace.
func listenTCP(cfg Config) (ln net.Listener, err error) {
	err = cfg.ServerNS.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(cfg.Server.String(), "0"))
		return err
	})
	return ln, err
}

// TCPBandwidth moves n bytes in size-byte writes over each of cfg.QPs
// connections at once (or for cfg.Duration seconds) and returns the
// aggregate MiB/s, from the first write to the receivers' last byte, and
// the bytes moved.
func TCPBandwidth(cfg Config, size int, n int64) (mibps float64, bytes int64, err error) {
	ln, err := listenTCP(cfg)
	if err != nil {
		return 0, 0, err
	}
	defer ln.Close()
	type conn struct{ c, s net.Conn }
	conns := make([]conn, cfg.QPs)
	for i := range conns {
		c, s, err := dialPair(cfg, ln)
		if err != nil {
			return 0, 0, err
		}
		defer c.Close()
		defer s.Close()
		conns[i] = conn{c, s}
	}
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = time.Now().Add(time.Duration(cfg.Duration) * time.Second)
		n = 1 << 62
	}
	var wg sync.WaitGroup
	moved := make([]int64, len(conns))
	errs := make([]error, len(conns))
	start := time.Now()
	for i, cn := range conns {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[i] = Send(cn.c, size, n, deadline)
		}()
		go func() {
			defer wg.Done()
			moved[i] = Sink(cn.s)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	var total int64
	for i := range conns {
		if errs[i] != nil {
			return 0, 0, errs[i]
		}
		total += moved[i]
	}
	return float64(total) / elapsed / (1 << 20), total, nil
}

// Send writes n bytes to c in size-byte writes (or as many as it can
// until deadline, if not zero), then closes c's sending side.
func Send(c net.Conn, size int, n int64, deadline time.Time) error {
	defer c.(*net.TCPConn).CloseWrite()
	buf := make([]byte, size)
	for sent := int64(0); sent < n && (deadline.IsZero() || time.Now().Before(deadline)); {
		k, err := c.Write(buf)
		sent += int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// Sink reads c to its end and returns the bytes read.
func Sink(c net.Conn) int64 {
	n, _ := io.CopyBuffer(io.Discard, c, make([]byte, 256<<10))
	return n
}

// TCPLatency ping-pongs size-byte messages over one connection, as
// ib_write_lat does over goroce, and returns perftest's t_typical of the
// one-way latency (µs).
func TCPLatency(cfg Config, size int) (float64, error) {
	ln, err := listenTCP(cfg)
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	c, s, err := dialPair(cfg, ln)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	defer s.Close()
	go Echo(s, BlockingReads(s), size)
	return PingPong(c, BlockingReads(c), size, cfg.LatIters)
}

// A ReadFull fills b from a connection, or fails.
type ReadFull func(b []byte) error

// BlockingReads reads c as Go programs do: a read with nothing to read
// parks the goroutine until the runtime's poller wakes it.
func BlockingReads(c net.Conn) ReadFull {
	return func(b []byte) error {
		_, err := io.ReadFull(c, b)
		return err
	}
}

// Echo sends back each size-byte message it reads from c until c fails
// or ends.
func Echo(c net.Conn, read ReadFull, size int) {
	b := make([]byte, size)
	for {
		if err := read(b); err != nil {
			return
		}
		if _, err := c.Write(b); err != nil {
			return
		}
	}
}

// PingPong sends iters size-byte messages over c (at least 5), each after
// the echo of the one before, and returns perftest's t_typical of the
// one-way latency (µs), as ib_write_lat measures it.
func PingPong(c net.Conn, read ReadFull, size, iters int) (float64, error) {
	p, err := perftest.Parse(perftest.Test{Verb: perftest.Write, Kind: perftest.Lat}, []string{"-n", fmt.Sprint(max(iters, 5))})
	if err != nil {
		return 0, err
	}
	posted := make([]int64, p.Iters)
	b := make([]byte, size)
	t0 := time.Now()
	for i := range posted {
		posted[i] = int64(time.Since(t0))
		if _, err := c.Write(b); err != nil {
			return 0, err
		}
		if err := read(b); err != nil {
			return 0, err
		}
	}
	return perftest.LatencyStats(p, posted).Typical, nil
}
