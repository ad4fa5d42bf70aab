// Command uc_pingpong is goroce's ibv_uc_pingpong: rc_pingpong's ping-pong
// of SENDs over one Unreliable Connected queue pair, with the same
// options, the same TCP address exchange (rdma-core's
// libibverbs/examples/uc_pingpong.c) and the same output.
//
// Usage:
//
//	uc_pingpong [options]          start a server and wait for a client
//	uc_pingpong [options] <host>   connect to the server at <host>
//
// As for rc_pingpong, -d names the goroce device by the IP address it
// binds (default 127.0.0.1):
//
//	uc_pingpong -d 127.0.0.1 &
//	uc_pingpong -d 127.0.0.2 127.0.0.1
//
// UC does not resend: a packet lost on the way loses its message, and,
// as with rdma-core's tool, the run then waits for a completion that never
// comes (here until --timeout).
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/goroce/goroce/internal/pingpong"
	"github.com/goroce/goroce/verbs"
)

func main() {
	os.Exit(pingpong.Run(context.Background(), verbs.QPTypeUC, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr))
}
