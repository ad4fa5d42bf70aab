// Command interop runs goroce against Linux Soft-RoCE (rdma_rxe) and the
// real perftest and ibv_*_pingpong tools in a QEMU guest, captures every
// run, checks every RoCE packet's ICRC with an independent checker
// (icrc-check.py) and prints a pass/fail table. It needs root, QEMU and
// the guest image that build.sh makes; see docs/INTEROP.md.
//
//	make interop                       # build/reuse the guest, run everything
//	go run ./test/interop -run 'write' # only cells whose name matches
//
// goroce runs in network namespace roce-host on 198.18.0.1; the real tools
// run in guest A (198.18.0.2). Every cell runs in both directions: goroce
// client -> real server in the guest ("go->A"), and real client in the
// guest -> goroce server ("A->go").
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// guestLimit (s) ends a real tool that hangs, so that it cannot hold
	// the port or the guest's only vCPU in the next cell; the whole run
	// of a cell ends after -timeout (50 s).
	guestLimit = 40
	netns      = "roce-host"
	bridge     = "br-roce"
	hostIP     = "198.18.0.1"
	guestIP    = "198.18.0.2"
	oobPort    = 18515
)

// pacing is the rate limit of paced cells: 4 MiB/s, one message per burst.
var pacing = []string{"--rate_limit=4", "--rate_units=M", "--rate_limit_type=SW", "--burst_size=1"}

func main() {
	here := flag.String("dir", "test/interop", "the harness folder (scripts, icrc-check.py)")
	runRe := flag.String("run", "", "only cells whose name (tool and flags) matches this regexp")
	dirs := flag.String("dirs", "go->A,A->go", "directions to run")
	noBuild := flag.Bool("no-build", false, "do not run build.sh (the image must exist)")
	keep := flag.Bool("keep", false, "leave the guest running afterwards")
	retries := flag.Int("retries", 1, "retries of a failed case")
	timeout := flag.Duration("timeout", 50*time.Second, "time limit of one run")
	flag.Parse()
	os.Exit(run(*here, *runRe, *dirs, *noBuild, *keep, *retries, *timeout))
}

func loud(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n")
	fmt.Fprintf(os.Stderr, "!!! INTEROP HARNESS: "+format+"\n", a...)
	fmt.Fprintf(os.Stderr, "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n")
}

func sh(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func guestAlive(art string) bool {
	b, err := os.ReadFile(filepath.Join(art, "run", "A.pid"))
	if err != nil {
		return false
	}
	cl, err := os.ReadFile("/proc/" + strings.TrimSpace(string(b)) + "/cmdline")
	return err == nil && bytes.Contains(cl, []byte("interop-A"))
}

func run(here, runRe, dirs string, noBuild, keep bool, retries int, timeout time.Duration) int {
	if os.Geteuid() != 0 {
		loud("needs root (network namespace, taps, QEMU)")
		return 2
	}
	here, _ = filepath.Abs(here)
	art := os.Getenv("INTEROP_ART")
	if art == "" {
		art = "/var/tmp/goroce-interop"
	}
	var re *regexp.Regexp
	if runRe != "" {
		re = regexp.MustCompile(runRe)
	}
	t0 := time.Now()
	stamp := t0.Format("20060102-150405")
	out := filepath.Join(art, "results", stamp)
	if err := os.MkdirAll(out, 0o755); err != nil {
		loud("%v", err)
		return 2
	}
	bin := filepath.Join(out, "bin")
	fmt.Printf("== building goroce's tools into %s\n", bin)
	if err := sh("go", "build", "-o", bin+"/", "./cmd/..."); err != nil {
		loud("go build failed: %v", err)
		return 2
	}
	if !noBuild {
		fmt.Println("== guest image (build.sh, reuses what exists)")
		if err := sh(filepath.Join(here, "build.sh")); err != nil {
			loud("build.sh failed: %v: the harness could not start", err)
			return 2
		}
	}
	wasUp := guestAlive(art)
	cleanup := func() {
		clearLoss() // a loss cell's rules, if an interrupt cut it short
		if keep || wasUp {
			fmt.Println("== guest A left running (-keep, or it was running before)")
			return
		}
		fmt.Println("== down.sh A")
		_ = sh(filepath.Join(here, "down.sh"), "A")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		cleanup()
		os.Exit(130)
	}()
	fmt.Println("== up.sh A")
	if err := sh(filepath.Join(here, "up.sh"), "A"); err != nil {
		loud("guest A did not boot (%v): NO INTEROP TEST RAN", err)
		cleanup()
		return 2
	}
	defer cleanup()
	if b, err := exec.Command(filepath.Join(here, "guest-run.sh"), "A", "gid-index; ibv_devices").CombinedOutput(); err != nil || !strings.HasPrefix(string(b), "1\n") {
		loud("guest A has no rxe0 GID at index 1: %v %s", err, b)
		return 2
	}
	clearLoss() // rules an interrupted run left
	r := &runner{here: here, bin: bin, out: out, timeout: timeout}
	var results []result
	for _, c := range matrix() {
		if re != nil && !re.MatchString(c.name()) {
			continue
		}
		for _, d := range strings.Split(dirs, ",") {
			tag := strings.NewReplacer(" ", "_", "-", "", ">", "").Replace(c.name() + "." + d)
			fmt.Printf("-- %-34s %-6s ", c.name(), d)
			start := time.Now()
			res := r.one(c, d, tag)
			for i := 0; i < retries && res.status == "FAIL"; i++ {
				fmt.Printf("FAIL (%s), retrying ", res.note)
				res = r.one(c, d, tag+".retry")
				res.retried = true
			}
			fmt.Printf("%s %.1fs %s\n", res.status, time.Since(start).Seconds(), res.note)
			results = append(results, res)
		}
	}
	table := renderTable(results)
	fmt.Printf("\n%s", table)
	_ = os.WriteFile(filepath.Join(out, "table.md"), []byte(table), 0o644)
	fails, passes, pend := 0, 0, 0
	for _, res := range results {
		switch res.status {
		case "FAIL":
			fails++
		case "PASS":
			passes++
		default:
			pend++
		}
	}
	fmt.Printf("\n%d passed, %d failed, %d pending; %.0fs; pcaps and outputs in %s\n", passes, fails, pend, time.Since(t0).Seconds(), out)
	if len(results) == 0 {
		loud("no cell matched")
		return 2
	}
	if fails > 0 {
		loud("%d interop case(s) FAILED", fails)
		return 1
	}
	return 0
}

func renderTable(rs []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| cell | direction | result | client | server | RoCE pkts | bad ICRC | note |\n")
	fmt.Fprintf(&b, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rs {
		st := r.status
		if r.retried {
			st += " (retry)"
		}
		who := map[string][2]string{"go->A": {"goroce", "rxe"}, "A->go": {"rxe", "goroce"}}[r.dir]
		cli, srv := "", ""
		if r.status != "PEND" {
			cli = who[0] + " " + summary(r.c, r.client)
			srv = who[1] + " " + summary(r.c, r.server)
		}
		pk, bad := "", ""
		if r.status != "PEND" {
			pk, bad = strconv.Itoa(r.packets), strconv.Itoa(r.bad)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.c.name(), r.dir, st, cli, srv, pk, bad, strings.ReplaceAll(r.note, "|", "/"))
	}
	return b.String()
}
