package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/internal/stats"
)

const statsHelp = `usage: goroce stats [-d DEVICE] [-json]

Prints the counters of every goroce device running on this host (any
process of this user), as rxe shows its hw_counters: one "name value" line
each, under a line naming the device and its process. DEVICE selects one
device by name (goroce_127.0.0.1) or address (127.0.0.1). The counters are
read from $GOROCE_RUN_DIR (default: goroce-<uid> in the temporary
directory), where each device publishes them while it runs.
`

func runStats(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.String("d", "", "show only this device (name or address)")
	asJSON := fs.Bool("json", false, "print JSON")
	fs.Usage = func() { fmt.Fprint(stderr, statsHelp); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	devs, err := stats.List()
	if err != nil {
		fmt.Fprintf(stderr, "goroce stats: %v\n", err)
		return 1
	}
	var shown []stats.Device
	for _, d := range devs {
		if *dev == "" || d.Name == *dev || strings.TrimPrefix(d.Name, "goroce_") == *dev {
			shown = append(shown, d)
		}
	}
	if len(shown) == 0 {
		if *dev != "" {
			fmt.Fprintf(stderr, "goroce stats: no running device %q (looked in %s)\n", *dev, stats.Dir())
		} else {
			fmt.Fprintf(stderr, "goroce stats: no running goroce device (looked in %s)\n", stats.Dir())
		}
		return 1
	}
	if *asJSON {
		type out struct {
			Device   string            `json:"device"`
			PID      int               `json:"pid"`
			Counters map[string]uint64 `json:"counters"`
		}
		var all []out
		for _, d := range shown {
			all = append(all, out{d.Name, d.PID, d.Counters.Map()})
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(all)
		return 0
	}
	for i, d := range shown {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%s (pid %d) port 1\n", d.Name, d.PID)
		for _, c := range stats.PublishedCounters() {
			fmt.Fprintf(stdout, "  %-24s %d\n", c, d.Counters[c])
		}
	}
	return 0
}
