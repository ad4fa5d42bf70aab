package bench

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/internal/netns"
)

// The ends' addresses across a veth pair (-veth), from 198.18.0.0/15, the
// range RFC 2544 sets aside for benchmarks.
var (
	VethServer = netip.MustParsePrefix("198.18.9.1/24")
	VethClient = netip.MustParsePrefix("198.18.9.2/24")
)

// NewVeth makes two network namespaces named after name, joined by a veth
// pair of the given MTU, the server's end at VethServer in the first and
// the client's at VethClient in the second. It deletes them when stop is
// called, and also if SIGINT or SIGTERM ends the process first, which
// then exits with status 130: a benchmark stopped by hand leaves no
// namespaces behind. Its messages on stderr start with prog.
func NewVeth(name string, mtu int, prog string, stderr io.Writer) (v *netns.Veth, stop func(), err error) {
	if v, err = netns.NewVeth(name, VethServer, VethClient, mtu); err != nil {
		return nil, nil, err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sig:
			if err := v.Close(); err != nil {
				fmt.Fprintf(stderr, "%s: -veth: %v\n", prog, err)
			}
			fmt.Fprintf(stderr, "%s: %v\n", prog, s)
			os.Exit(130)
		case <-done:
		}
	}()
	return v, func() {
		signal.Stop(sig)
		close(done)
		if err := v.Close(); err != nil {
			fmt.Fprintf(stderr, "%s: -veth: %v\n", prog, err)
		}
	}, nil
}
