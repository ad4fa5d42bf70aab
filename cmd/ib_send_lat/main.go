// Command ib_send_lat is goroce's twin of perftest's ib_send_lat: the same flags,
// out-of-band exchange and report, on a goroce device. See docs/PERFTEST.md.
package main

import (
	"os"

	"github.com/goroce/goroce/internal/perftest"
)

func main() {
	os.Exit(perftest.Main(perftest.Tools["ib_send_lat"], os.Args[1:], os.Stdout, os.Stderr))
}
