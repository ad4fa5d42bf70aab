package pingpong

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// The out-of-band exchange of rdma-core's pingpong examples, over one TCP
// connection:
//
//	client                         server
//	connect ───────────────────▶   accept, close the listener
//	write 52-byte address ─────▶   read it, connect the QP (RTR, RTS)
//	read 52-byte address   ◀─────  write its own address
//	write "done\0" ────────────▶   read it
//	close                          close
//
// The server's QP is ready before the client learns its address, so the
// client's first SEND never finds it in RESET. Every read and write after
// the connection is made is bounded by the timeout.

// clientExchange connects to the server at host:port, sends local and
// returns the server's address.
func clientExchange(ctx context.Context, host string, port uint16, local dest, timeout time.Duration) (dest, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return dest{}, fmt.Errorf("reach server %s: %w", addr, err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(time.Now().Add(timeout))
	m := local.marshal()
	if _, err := c.Write(m[:]); err != nil {
		return dest{}, fmt.Errorf("send local address: %w", err)
	}
	if _, err := io.ReadFull(c, m[:]); err != nil {
		return dest{}, fmt.Errorf("read remote address: %w", err)
	}
	if _, err := io.WriteString(c, doneMsg); err != nil {
		return dest{}, fmt.Errorf("send %q: %w", doneMsg, err)
	}
	return parseDest(m[:])
}

// serverExchange accepts one client on ln, which it closes, reads the
// client's address, calls connect with it, and sends local. accept waits
// for a client until ctx ends.
func serverExchange(ctx context.Context, ln net.Listener, local dest, timeout time.Duration, connect func(dest) error) (dest, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	c, err := ln.Accept()
	ln.Close()
	if !stop() || err != nil {
		if err == nil {
			c.Close()
			err = ctx.Err()
		}
		return dest{}, fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	stop = context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c.SetDeadline(time.Now().Add(timeout))
	var m [msgLen]byte
	if n, err := io.ReadFull(c, m[:]); err != nil {
		return dest{}, fmt.Errorf("read remote address (%d of %d bytes): %w", n, msgLen, err)
	}
	remote, err := parseDest(m[:])
	if err != nil {
		return dest{}, err
	}
	if err := connect(remote); err != nil {
		return dest{}, fmt.Errorf("connect QP to the client: %w", err)
	}
	m = local.marshal()
	if _, err := c.Write(m[:]); err != nil {
		return dest{}, fmt.Errorf("send local address: %w", err)
	}
	var done [len(doneMsg)]byte
	if _, err := io.ReadFull(c, done[:]); err != nil {
		return dest{}, fmt.Errorf("read %q: %w", doneMsg, err)
	}
	if string(done[:]) != doneMsg {
		return dest{}, fmt.Errorf("%w: got %q, want %q", errMsg, done[:], doneMsg)
	}
	return remote, nil
}

// listen opens the server's TCP socket on every address, as rc_pingpong
// does with getaddrinfo(NULL, port, AI_PASSIVE); Go sets SO_REUSEADDR.
func listen(port uint16) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
	if err != nil {
		return nil, fmt.Errorf("listen on TCP port %d: %w", port, err)
	}
	return ln, nil
}
