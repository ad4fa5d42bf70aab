// Command goroce is the administration tool of the goroce software RDMA
// NIC: it decodes RoCEv2 captures, lists devices and their attributes, and
// shows the counters of running devices, and benchmarks goroce against TCP.
//
//	goroce bench                 perftest's write BW and latency tests, then TCP, one run
//	goroce decode FILE.pcap...   print one line per RoCEv2 packet and check its ICRC
//	goroce devices               list the devices of this host, as ibv_devices does
//	goroce devinfo [-v] [-d DEV] print device attributes, as ibv_devinfo does
//	goroce stats [-d DEVICE]     show the counters of the devices running here
package main

import (
	"fmt"
	"io"
	"os"
)

type command struct {
	name, usage, summary string
	run                  func(args []string, stdout, stderr io.Writer) int
}

var commands = []command{
	{"bench", "bench [-s SIZE] [-q QPS] [-D SEC] [-op OP]", "benchmark goroce against TCP on loopback, no setup needed", runBench},
	{"decode", "decode [-q] FILE.pcap...", "print one line per RoCEv2 packet and check its ICRC", runDecode},
	{"devices", "devices", "list the goroce devices of this host (ibv_devices)", runDevices},
	{"devinfo", "devinfo [-v] [-d DEV] [-i PORT] [-l]", "print device attributes (ibv_devinfo)", runDevinfo},
	{"stats", "stats [-d DEVICE] [-json]", "show the counters of the goroce devices running here", runStats},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "goroce: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: goroce COMMAND [ARGS]\n\ncommands:")
	for _, c := range commands {
		if c.usage == "" {
			continue
		}
		fmt.Fprintf(w, "  %-28s %s\n", c.usage, c.summary)
	}
}
