// Command rc_pingpong is goroce's ibv_rc_pingpong: it runs a ping-pong of
// SENDs over one RC queue pair between a server and a client, exchanging
// the QP addresses over TCP byte for byte as rdma-core's ibv_rc_pingpong
// (libibverbs/examples/rc_pingpong.c) does, so that the other side can be
// that tool on a Linux rxe device (run it with -g, since RoCE needs GIDs).
//
// Usage:
//
//	rc_pingpong [options]          start a server and wait for a client
//	rc_pingpong [options] <host>   connect to the server at <host>
//
// The options, defaults and output are rc_pingpong's; -d names the goroce
// device by the IP address it binds (default 127.0.0.1), so two processes
// on one host use two loopback addresses:
//
//	rc_pingpong -d 127.0.0.1 &
//	rc_pingpong -d 127.0.0.2 127.0.0.1
//
// Options goroce cannot honour (-o, -O, -P, -t, -j, -U) are refused with a
// message and exit status 1. A peer that goes silent for --timeout (5s by
// default) during the exchange or the ping-pong ends the run with an error;
// a server waits for its client without limit.
//
// Unlike rdma-core's tool, a successful run does not close its QP at once:
// it keeps answering until the peer has been silent for 150 ms (at most
// 2 s). The last packet each side gets is a SEND whose ACK may be lost;
// the peer then retransmits the SEND, and a QP that is already gone would
// leave it to fail with RETRY_EXC_ERR.
//
// Two options are goroce's own: --timeout, and --fault=SPEC, which makes
// this process's device drop, duplicate, reorder, delay, corrupt or
// CE-mark the packets it sends (verbs.Config.Fault; the grammar is in
// docs/FAULT.md), to see how an application copes with a bad network:
//
//	rc_pingpong -d 127.0.0.2 -c -s 1048576 --fault 'reorder=25%,dup=1%,delay=1ms,seed=7' 127.0.0.1
//
// With GOROCE_PRINT_COUNTERS=1 in the environment, rc_pingpong prints its
// device's counters (verbs.Device.Counters) on stderr as it exits, on
// success or failure, in one line: "counters: name=value ...", sorted by
// name.
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/goroce/goroce/internal/pingpong"
	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(pingpong.Run(context.Background(), verbs.QPTypeRC, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}
