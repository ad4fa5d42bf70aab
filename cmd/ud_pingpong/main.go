// Command ud_pingpong is goroce's ibv_ud_pingpong: a ping-pong of SENDs
// over one Unreliable Datagram queue pair between a server and a client,
// with the options, the TCP address exchange and the output of rdma-core's
// libibverbs/examples/ud_pingpong.c, so that the other side can be that
// tool on a Linux rxe device (run it with -g, since RoCE needs GIDs).
//
// Usage:
//
//	ud_pingpong [options]          start a server and wait for a client
//	ud_pingpong [options] <host>   connect to the server at <host>
//
// The options are ud_pingpong's: -p, -d, -i, -s, -r, -n, -l, -e, -g and -c
// (no -m: a UD QP has no path MTU), plus goroce's --timeout and --fault as
// in rc_pingpong. -d names the goroce device by the IP address it binds
// (default 127.0.0.1), so two processes on one host use two loopback
// addresses:
//
//	ud_pingpong -d 127.0.0.1 &
//	ud_pingpong -d 127.0.0.2 127.0.0.1
//
// Each side's QP has the Q_Key 0x11111111 and sends to an address handle
// made from the peer's GID, naming the peer's QPN in each work request.
// A message is one datagram, so -s may not exceed the port's active MTU
// (4096 on loopback, 1024 on an Ethernet interface of MTU 1500); the
// default is 1024 bytes. Every receive buffer has 40 bytes more than the
// message, for the GRH that starts each UD receive.
//
// UD does not resend: a lost datagram leaves both sides waiting, as with
// rdma-core's tool, here until --timeout (5s by default) ends the run with
// an error. Where rdma-core's tool sends an all-zero GID without -g, this
// one sends its device's GID, as RoCE needs one to address the peer.
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/goroce/goroce/internal/pingpong"
	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(pingpong.Run(context.Background(), verbs.QPTypeUD, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}
