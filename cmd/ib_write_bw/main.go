// Command ib_write_bw is goroce's twin of perftest's ib_write_bw: the same flags,
// out-of-band exchange and report, on a goroce device. See docs/PERFTEST.md.
package main

import (
	"os"

	"github.com/goroce/goroce/internal/perftest"
)

func main() {
	os.Exit(perftest.Main(perftest.Tools["ib_write_bw"], os.Args[1:], os.Stdout, os.Stderr))
}
