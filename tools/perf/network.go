package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/netns"
)

// networkFlags are the flags that say where the two ends run, which the
// measuring commands share: two loopback addresses (-addrs), the
// same-host path (-samehost) or a veth pair between two namespaces made
// for the run (-veth, -veth-mtu).
type networkFlags struct {
	addrs    *string
	sameHost *bool
	veth     *bool
	vethMTU  *int
}

func addNetworkFlags(fs *flag.FlagSet) *networkFlags {
	return &networkFlags{
		addrs:    fs.String("addrs", "127.0.0.1,127.0.0.2", "the two ends' addresses: server,client"),
		sameHost: fs.Bool("samehost", false, "run goroce over the same-host path (shared memory, as GOROCE_SAMEHOST=1 does) instead of UDP"),
		veth: fs.Bool("veth", false, "run both ends, goroce and TCP, in two network namespaces made for the run and joined by a veth pair, at "+
			bench.VethServer.String()+" and "+bench.VethClient.String()+" (root; needs the ip command)"),
		vethMTU: fs.Int("veth-mtu", 9000, "with -veth: the veth pair's MTU (9000 gives RoCE MTU 4096)"),
	}
}

// network is where the two ends run, as the flags say.
type network struct {
	server, client     netip.Addr
	serverNS, clientNS *netns.NS   // nil: this process's own
	veth               *netns.Veth // nil without -veth
	sameHost           bool
	name               string // for the report: "loopback", or the veth pair's
	stop               func() // deletes the veth pair's namespaces; does nothing without -veth
}

// open checks the flags (fs holds those set) and, with -veth, makes the
// veth pair; call the network's stop when done. On an error it returns
// the exit status: 2 for flags that do not fit, 1 for a failure.
func (f *networkFlags) open(fs *flag.FlagSet, prog string, stderr io.Writer) (*network, int) {
	n := &network{name: "loopback", stop: func() {}}
	// GOROCE_SAMEHOST=1 would turn the path on in verbs.Open anyway;
	// taking it here too makes the report say which path ran.
	n.sameHost = *f.sameHost || os.Getenv("GOROCE_SAMEHOST") == "1"
	a, b, ok := strings.Cut(*f.addrs, ",")
	var err error
	if n.server, err = netip.ParseAddr(strings.TrimSpace(a)); err == nil {
		n.client, err = netip.ParseAddr(strings.TrimSpace(b))
	}
	if !ok || err != nil {
		fmt.Fprintf(stderr, "%s: -addrs %q: want two addresses, server,client\n", prog, *f.addrs)
		return nil, 2
	}
	if !*f.veth {
		return n, 0
	}
	addrsSet := false
	fs.Visit(func(fl *flag.Flag) { addrsSet = addrsSet || fl.Name == "addrs" })
	if addrsSet || n.sameHost {
		fmt.Fprintf(stderr, "%s: -veth picks the addresses and runs over UDP: it excludes -addrs and -samehost (the same-host path joins devices of one namespace)\n", prog)
		return nil, 2
	}
	if n.veth, n.stop, err = bench.NewVeth("goroce-perf", *f.vethMTU, prog, stderr); err != nil {
		fmt.Fprintf(stderr, "%s: -veth: %v\n", prog, err)
		return nil, 1
	}
	n.server, n.client = n.veth.A, n.veth.B
	n.serverNS, n.clientNS = n.veth.NSA, n.veth.NSB
	n.name = fmt.Sprintf("veth between two namespaces, MTU %d", *f.vethMTU)
	return n, 0
}
