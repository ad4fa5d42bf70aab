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
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/syncbuf"
)

const (
	// guestLimit (s) ends a real tool that hangs, so that it cannot hold
	// the port or the guest's only vCPU in the next cell; the whole run
	// of a cell ends after -timeout (50 s).
	guestLimit = 40
	netns      = "roce-host"
	hostIP     = "198.18.0.1"
	guestIP    = "198.18.0.2"
	oobPort    = 18515
)

// A cell of the matrix: one tool with one set of flags, run both ways.
type cell struct {
	tool      string   // goroce's binary (cmd/<tool>)
	guestTool string   // the real tool in the guest
	kind      string   // "bw", "lat" or "pp"
	args      []string // flags both sides get
	size      int      // expected #bytes column (pp: message size)
	iters     int
	pending   bool // goroce may not support this yet (UC/UD, ud_pingpong)
	// paced: goroce, when it is the sending client, runs perftest's
	// software rate limiter. UC and UD have no flow control, and the
	// emulated guest absorbs far less than a host sender at full speed
	// sends: such a sender overruns the guest's receive queue, and the
	// real server waits forever for the lost messages (as it would behind
	// any slow receiver).
	paced bool
}

// pacing is the rate limit of paced cells: 4 MiB/s, one message per burst.
var pacing = []string{"--rate_limit=4", "--rate_units=M", "--rate_limit_type=SW", "--burst_size=1"}

func (c cell) name() string {
	return strings.TrimSpace(c.tool + " " + strings.Join(c.args, " "))
}

// matrix returns the cells the harness runs, each in both directions:
// the perftest and ibv_*_pingpong tools goroce has twins of.
func matrix() []cell {
	const n = 200
	var cs []cell
	bw := func(tool string, conn string, sizes ...int) {
		for _, s := range sizes {
			args := []string{"-s", strconv.Itoa(s), "-n", strconv.Itoa(n)}
			if conn != "RC" {
				args = append(args, "-c", conn)
			}
			cs = append(cs, cell{tool: tool, guestTool: tool, kind: "bw", args: args, size: s, iters: n, pending: conn != "RC", paced: conn != "RC"})
		}
	}
	bw("ib_write_bw", "RC", 2, 4096, 65536)
	bw("ib_read_bw", "RC", 2, 4096, 65536)
	bw("ib_send_bw", "RC", 2, 4096, 65536)
	bw("ib_atomic_bw", "RC", 8)
	bw("ib_send_bw", "UC", 2, 4096, 65536)
	bw("ib_write_bw", "UC", 2, 4096, 65536)
	bw("ib_send_bw", "UD", 2, 1024) // a UD message is at most the path MTU (1024 here)
	for _, t := range []string{"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		size := 2
		if t == "ib_atomic_lat" {
			size = 8
		}
		cs = append(cs, cell{tool: t, guestTool: t, kind: "lat", args: []string{"-n", strconv.Itoa(n)}, size: size, iters: n})
	}
	// WRITEs of several packets: goroce sends each packet as a WRITE_ONLY
	// of its own (docs/WIRE.md, "Split WRITEs"), and waits for the bytes
	// of rxe's one message.
	cs = append(cs, cell{tool: "ib_write_lat", guestTool: "ib_write_lat", kind: "lat", args: []string{"-s", "8192", "-n", strconv.Itoa(n)}, size: 8192, iters: n})
	cs = append(cs,
		cell{tool: "rc_pingpong", guestTool: "ibv_rc_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n)}, size: 4096, iters: n},
		// ibv_ud_pingpong's default 2048 bytes do not fit the guest's 1024-byte path MTU.
		cell{tool: "ud_pingpong", guestTool: "ibv_ud_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n), "-s", "512"}, size: 512, iters: n, pending: true},
		cell{tool: "uc_pingpong", guestTool: "ibv_uc_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n)}, size: 4096, iters: n},
	)
	return cs
}

// The numbers one side printed.
type report struct {
	ok     bool
	bytes  int
	iters  int
	values []float64 // bw: peak, avg, Mpps; lat: min, max, typical, avg, ...; pp: seconds, Mbit/s, usec/iter
	err    string
}

var floatRe = `([-+0-9.eE]+|-?nan|-?inf)`

// parseBW finds the BW result line of a perftest report.
func parseBW(out string) report {
	return parseTable(out, "BW average", 5)
}

// parseLat finds the latency result line of a perftest report.
func parseLat(out string) report {
	return parseTable(out, "t_typical", 7)
}

func parseTable(out, header string, minFields int) report {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") || !strings.Contains(l, header) {
			continue
		}
		for _, m := range lines[i+1:] {
			f := strings.Fields(m)
			if len(f) == 0 {
				continue
			}
			if len(f) < minFields {
				break
			}
			b, err1 := strconv.Atoi(f[0])
			it, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				break
			}
			r := report{ok: true, bytes: b, iters: it}
			for _, s := range f[2:] {
				v, err := strconv.ParseFloat(s, 64)
				if err != nil {
					return report{err: "bad number " + s}
				}
				r.values = append(r.values, v)
			}
			return r
		}
	}
	return report{err: "no result table"}
}

var (
	ppBytes = regexp.MustCompile(`(?m)^(\d+) bytes in ` + floatRe + ` seconds = ` + floatRe + ` Mbit/sec`)
	ppIters = regexp.MustCompile(`(?m)^(\d+) iters in ` + floatRe + ` seconds = ` + floatRe + ` usec/iter`)
)

// parsePP finds the two result lines of ibv_*_pingpong.
func parsePP(out string) report {
	mb := ppBytes.FindStringSubmatch(out)
	mi := ppIters.FindStringSubmatch(out)
	if mb == nil || mi == nil {
		return report{err: "no result lines"}
	}
	b, _ := strconv.Atoi(mb[1])
	it, _ := strconv.Atoi(mi[1])
	secs, _ := strconv.ParseFloat(mb[2], 64)
	mbit, _ := strconv.ParseFloat(mb[3], 64)
	us, _ := strconv.ParseFloat(mi[3], 64)
	return report{ok: true, bytes: b, iters: it, values: []float64{secs, mbit, us}}
}

// check parses one side's output and says what is implausible about it.
// need is false where the real tool prints no table on that side.
func check(c cell, out string, need bool) (report, string) {
	var r report
	switch c.kind {
	case "bw":
		r = parseBW(out)
	case "lat":
		r = parseLat(out)
	case "pp":
		r = parsePP(out)
	}
	if !r.ok {
		if !need {
			return r, ""
		}
		return r, r.err
	}
	switch c.kind {
	case "bw":
		if r.bytes != c.size {
			return r, fmt.Sprintf("#bytes %d, want %d", r.bytes, c.size)
		}
		if r.iters != c.iters {
			return r, fmt.Sprintf("#iterations %d, want %d", r.iters, c.iters)
		}
		// perftest prints 2 decimals of MiB/s: 2-byte messages show 0.00,
		// so the message rate is what must be positive, and the average
		// must agree with it.
		avg, rate := r.values[1], r.values[2]
		if !(rate > 0 && rate < 100) {
			return r, fmt.Sprintf("MsgRate %v Mpps", rate)
		}
		if want := rate * 1e6 * float64(c.size) / (1 << 20); !(avg >= 0 && math.Abs(avg-want) <= 0.01+0.1*want) {
			return r, fmt.Sprintf("BW average %v MiB/s, but %v Mpps of %d bytes is %.3f", avg, rate, c.size, want)
		}
	case "lat":
		if r.bytes != c.size {
			return r, fmt.Sprintf("#bytes %d, want %d", r.bytes, c.size)
		}
		if r.iters != c.iters {
			return r, fmt.Sprintf("#iterations %d, want %d", r.iters, c.iters)
		}
		mn, mx, typ, avg := r.values[0], r.values[1], r.values[2], r.values[3]
		if !(mn > 0 && mn <= typ && typ <= mx && mn <= avg && avg <= mx && mx < 1e7) {
			return r, fmt.Sprintf("latencies min %v typical %v avg %v max %v", mn, typ, avg, mx)
		}
	case "pp":
		if r.iters != c.iters {
			return r, fmt.Sprintf("%d iters, want %d", r.iters, c.iters)
		}
		if want := 2 * c.size * c.iters; r.bytes != want {
			return r, fmt.Sprintf("%d bytes, want %d", r.bytes, want)
		}
		if !(r.values[1] > 0 && r.values[2] > 0) {
			return r, fmt.Sprintf("rates %v Mbit/s %v usec/iter", r.values[1], r.values[2])
		}
	}
	return r, ""
}

// serverPrints says whether the real tool prints a result table on the
// server side (perftest's read/atomic latency servers print none).
func serverPrints(c cell) bool {
	return c.kind != "lat" || c.tool == "ib_send_lat" || c.tool == "ib_write_lat"
}

func summary(c cell, r report) string {
	if !r.ok {
		return "-"
	}
	switch c.kind {
	case "bw":
		return fmt.Sprintf("%.2f MB/s %.4f Mpps", r.values[1], r.values[2])
	case "lat":
		return fmt.Sprintf("%.1f us", r.values[2])
	default:
		return fmt.Sprintf("%.1f us/it", r.values[2])
	}
}

// ---------------------------------------------------------------------------

type runner struct {
	here    string // test/interop
	bin     string // goroce binaries
	out     string // results directory
	timeout time.Duration
}

type result struct {
	c       cell
	dir     string // "go->A" or "A->go"
	status  string // PASS, FAIL, PEND
	retried bool
	client  report
	server  report
	packets int
	bad     int
	note    string
}

var errPending = errors.New("pending")

// guestServerScript runs cmd in the guest in the background, prints
// "PID n" and "LISTENING" once TCP port 18515 listens (shell builtins only:
// a fork is slow in a guest emulated by TCG), then the tool's output and
// exits with its status.
func guestServerScript(cmd string) string {
	return fmt.Sprintf(`cd /tmp
timeout %d %s > /tmp/srv.out 2>&1 &
p=$!
echo "PID $p"
lis() { local f l st; for f in /proc/net/tcp /proc/net/tcp6; do while read -r _ l _ st _; do [[ $l == *:%04X && $st == 0A ]] && return 0; done < $f; done; return 1; }
i=0; while ! lis && kill -0 $p 2>/dev/null && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done
echo LISTENING
wait $p; rc=$?
echo "=== output"
cat /tmp/srv.out
exit $rc
`, guestLimit, cmd, oobPort)
}

func (r *runner) guestCmd(c cell, peer string) string {
	args := append([]string{}, c.args...)
	switch c.kind {
	case "pp":
		args = append([]string{"-d", "rxe0", "-g", "1"}, args...)
	default:
		args = append([]string{"-d", "rxe0", "-x", "1", "-F"}, args...)
	}
	if peer != "" {
		args = append(args, peer)
	}
	return c.guestTool + " " + strings.Join(args, " ")
}

func (r *runner) hostCmd(c cell, peer string) []string {
	args := []string{"netns", "exec", netns, filepath.Join(r.bin, c.tool), "-d", hostIP}
	if c.kind != "pp" {
		args = append(args, "-F")
	}
	args = append(args, c.args...)
	if peer != "" && c.paced {
		args = append(args, pacing...)
	}
	if peer != "" {
		args = append(args, peer)
	}
	return args
}

func ssh(ctx context.Context, here, script string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(here, "guest-run.sh"), "A", script)
}

// listening says whether process pid (in its network namespace) has a
// TCP socket listening on the out-of-band port.
func listening(pid int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) > 3 && strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", oobPort)) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

type proc struct {
	cmd  *exec.Cmd
	buf  *syncbuf.Buffer
	done chan struct{}
	err  error
}

func start(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, buf: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout = p.buf
	cmd.Stderr = p.buf
	cmd.Stdin = nil
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed (" + ws.Signal().String() + ")"
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

// capture runs tcpdump on the bridge into file until stop is called.
func capture(file string) (stop func(), err error) {
	cmd := exec.Command("ip", "netns", "exec", netns, "tcpdump", "-i", "br-roce", "-s", "0", "-U",
		"--immediate-mode", "-w", file, fmt.Sprintf("udp port 4791 or tcp port %d", oobPort))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(ready)
			}
		}
		if !once {
			close(ready)
		}
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
	}
	return func() {
		time.Sleep(200 * time.Millisecond) // the last ACKs
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}, nil
}

var icrcLine = regexp.MustCompile(`TOTAL roce_packets=(\d+) icrc_ok=(\d+) icrc_bad=(\d+)`)

func (r *runner) icrc(pcap string) (packets, bad int, out string, err error) {
	b, _ := exec.Command("python3", filepath.Join(r.here, "icrc-check.py"), pcap).CombinedOutput()
	m := icrcLine.FindSubmatch(b)
	if m == nil {
		return 0, 0, string(b), fmt.Errorf("icrc-check.py: %s", strings.TrimSpace(string(b)))
	}
	packets, _ = strconv.Atoi(string(m[1]))
	bad, _ = strconv.Atoi(string(m[3]))
	return packets, bad, string(b), nil
}

func isPending(out string) bool {
	return strings.Contains(out, "does not support") || strings.Contains(out, "not supported")
}

// one runs a cell in one direction once.
func (r *runner) one(c cell, dir, tag string) result {
	res := result{c: c, dir: dir, status: "FAIL"}
	if _, err := os.Stat(filepath.Join(r.bin, c.tool)); err != nil {
		res.status = "PEND"
		res.note = "goroce has no cmd/" + c.tool + " yet"
		return res
	}
	base := filepath.Join(r.out, tag)
	pcap := base + ".pcap"
	stop, err := capture(pcap)
	if err != nil {
		res.note = "tcpdump: " + err.Error()
		return res
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var cliOut, srvOut string
	var cliErr, srvErr error
	if dir == "go->A" {
		cliOut, srvOut, cliErr, srvErr, err = r.goClient(ctx, c)
	} else {
		cliOut, srvOut, cliErr, srvErr, err = r.goServer(ctx, c)
	}
	stop()
	_ = os.WriteFile(base+".client.txt", []byte(cliOut), 0o644)
	_ = os.WriteFile(base+".server.txt", []byte(srvOut), 0o644)
	if errors.Is(err, errPending) {
		res.status = "PEND"
		goOut := cliOut
		if dir == "A->go" {
			goOut = srvOut
		}
		res.note = "goroce: " + firstLine(goOut)
		_ = os.Remove(pcap)
		return res
	}
	var notes []string
	if err != nil {
		notes = append(notes, err.Error())
	}
	if cliErr != nil {
		notes = append(notes, "client "+exitText(cliErr))
	}
	if srvErr != nil {
		notes = append(notes, "server "+exitText(srvErr))
	}
	var why string
	res.client, why = check(c, cliOut, true)
	if why != "" {
		notes = append(notes, "client: "+why)
	}
	res.server, why = check(c, srvOut, serverPrints(c))
	if why != "" {
		notes = append(notes, "server: "+why)
	}
	pk, bad, icrcOut, err := r.icrc(pcap)
	_ = os.WriteFile(base+".icrc.txt", []byte(icrcOut), 0o644)
	res.packets, res.bad = pk, bad
	switch {
	case err != nil:
		notes = append(notes, err.Error())
	case bad > 0:
		notes = append(notes, fmt.Sprintf("%d bad ICRCs", bad))
	case pk == 0:
		notes = append(notes, "no RoCE packets captured")
	}
	if len(notes) == 0 {
		res.status = "PASS"
	} else {
		guestOut := srvOut
		if dir == "A->go" {
			guestOut = cliOut
		}
		if w := clockWarning(guestOut); w != "" {
			notes = append(notes, w)
		}
	}
	res.note = strings.Join(notes, "; ")
	return res
}

// clockWarning names a failure's likely cause when the guest's perftest
// warned that it could not estimate its CPU's clock: it measures time in
// cycles and converts them with that estimate, which on a busy virtual
// machine can fail (perftest's get_cpu_mhz: "Correlation coefficient r^2
// ... < 0.9"), and then prints rates of 0 whatever moved. goroce's end,
// which prints the report the two ends exchange, then shows the same 0.
func clockWarning(guestOut string) string {
	i := strings.Index(guestOut, "Correlation coefficient r^2")
	if i < 0 {
		return ""
	}
	return "the guest's perftest could not estimate its CPU clock (" + firstLine(guestOut[i:]) + "), which zeroes its rates"
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// guestOutput strips the markers of guestServerScript.
func guestOutput(s string) string {
	if i := strings.Index(s, "=== output\n"); i >= 0 {
		return s[i+len("=== output\n"):]
	}
	return s
}

// goClient: the real server in the guest, goroce's client on the host.
func (r *runner) goClient(ctx context.Context, c cell) (cli, srv string, cliErr, srvErr error, err error) {
	g, err := start(ssh(ctx, r.here, guestServerScript(r.guestCmd(c, ""))))
	if err != nil {
		return "", "", nil, nil, err
	}
	gpid := ""
	for !strings.Contains(g.buf.String(), "LISTENING") && !g.exited() && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if m := regexp.MustCompile(`PID (\d+)`).FindStringSubmatch(g.buf.String()); m != nil {
		gpid = m[1]
	}
	if g.exited() {
		return "", guestOutput(g.buf.String()), nil, g.err, errors.New("guest server did not start")
	}
	h, err := start(exec.CommandContext(ctx, "ip", r.hostCmd(c, guestIP)...))
	if err != nil {
		return "", "", nil, nil, err
	}
	<-h.done
	cli = h.buf.String()
	if h.err != nil && c.pending && isPending(cli) {
		if gpid != "" {
			_ = exec.Command(filepath.Join(r.here, "guest-run.sh"), "A", "kill "+gpid).Run()
		}
		<-g.done
		return cli, guestOutput(g.buf.String()), h.err, g.err, errPending
	}
	if h.err != nil && gpid != "" { // do not let the guest server wait for its timeout
		select {
		case <-g.done:
		case <-time.After(3 * time.Second):
			_ = exec.Command(filepath.Join(r.here, "guest-run.sh"), "A", "kill "+gpid).Run()
		}
	}
	<-g.done
	if ctx.Err() != nil {
		err = fmt.Errorf("timeout after %v", r.timeout)
	}
	return cli, guestOutput(g.buf.String()), h.err, g.err, err
}

// goServer: goroce's server on the host, the real client in the guest.
func (r *runner) goServer(ctx context.Context, c cell) (cli, srv string, cliErr, srvErr error, err error) {
	h, err := start(exec.CommandContext(ctx, "ip", r.hostCmd(c, "")...))
	if err != nil {
		return "", "", nil, nil, err
	}
	for !listening(h.cmd.Process.Pid) && !h.exited() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if h.exited() {
		srv = h.buf.String()
		if c.pending && isPending(srv) {
			return "", srv, nil, h.err, errPending
		}
		return "", srv, nil, h.err, errors.New("goroce server did not start")
	}
	g, err := start(ssh(ctx, r.here, fmt.Sprintf("timeout %d %s", guestLimit, r.guestCmd(c, hostIP))))
	if err != nil {
		_ = h.cmd.Process.Kill()
		return "", "", nil, nil, err
	}
	<-g.done
	if g.err != nil {
		select {
		case <-h.done:
		case <-time.After(3 * time.Second):
			_ = h.cmd.Process.Kill()
		}
	}
	<-h.done
	if ctx.Err() != nil {
		err = fmt.Errorf("timeout after %v", r.timeout)
	}
	return g.buf.String(), h.buf.String(), g.err, h.err, err
}

// ---------------------------------------------------------------------------

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
