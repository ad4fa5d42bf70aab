package netns_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tools, each built once for the whole package into binDir, which
// TestMain removes.
var (
	buildMu sync.Mutex
	binDir  string
	built   = map[string]string{} // tool name → path
)

func TestMain(m *testing.M) {
	if os.Getenv(memberEnv) != "" {
		// Re-executed by a multicast test as one group member.
		os.Exit(member(os.Stdin, os.Stdout, os.Stderr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// rcPingpong returns the path of a freshly built cmd/rc_pingpong.
func rcPingpong(t testing.TB) string { return buildTool(t, "rc_pingpong") }

// buildTool returns the path of a freshly built cmd/<name>, building it
// on first use.
func buildTool(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command to build %s: %v", name, err)
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "goroce-netns-"); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p := filepath.Join(binDir, name)
	out, err := exec.CommandContext(ctx, gobin, "build", "-o", p, "github.com/goroce/goroce/cmd/"+name).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", name, err, out)
	}
	built[name] = p
	return p
}

// output collects what a process writes; ready is closed at the end of the
// first line.
type output struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan struct{}
}

func newOutput() *output { return &output{ready: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	had := bytes.IndexByte(o.buf.Bytes(), '\n') >= 0
	o.buf.Write(p)
	if !had && bytes.IndexByte(p, '\n') >= 0 {
		close(o.ready)
	}
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// proc is one rc_pingpong (or other tool) running in a namespace.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *output
	done           chan struct{} // closed when it has exited; then err and exited are set
	err            error
	exited         time.Time
}

// start runs rc_pingpong with args in namespace ns, with its counters
// printed at exit (GOROCE_PRINT_COUNTERS=1) and its counters file in a
// directory of the test's (GOROCE_RUN_DIR), so that a killed process
// leaves nothing behind. ip netns exec execs the program, so the process
// is rc_pingpong itself: killing it kills the tool. The process is killed
// when ctx ends and, at the latest, when the test ends.
func start(t testing.TB, ctx context.Context, tp *topology, name, ns, runDir string, args ...string) *proc {
	t.Helper()
	return startBin(t, ctx, tp, rcPingpong(t), name, ns, runDir, args...)
}

// startBin is start for the program at bin.
func startBin(t testing.TB, ctx context.Context, tp *topology, bin, name, ns, runDir string, args ...string) *proc {
	t.Helper()
	argv := tp.inNS(ns, append([]string{bin}, args...)...)
	p := &proc{name: name, stdout: newOutput(), stderr: newOutput(), done: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, argv[0], argv[1:]...)
	p.cmd.Env = append(os.Environ(), "GOROCE_PRINT_COUNTERS=1", "GOROCE_RUN_DIR="+runDir)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 5 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.err, p.exited = err, time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill() // an error only says it is gone already
		<-p.done
	})
	return p
}

// waitReady waits for the first line of output: a server prints it once it
// listens.
func (p *proc) waitReady(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-p.stdout.ready:
	case <-p.done:
		t.Fatalf("%s exited before printing anything: %v\n%s%s", p.name, p.err, p.stdout, p.stderr)
	case <-time.After(within):
		t.Fatalf("%s printed nothing in %v", p.name, within)
	}
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s still running after %v\nstdout:\n%s\nstderr:\n%s", p.name, within, p.stdout, p.stderr)
	}
	return p.code()
}

// code is the exit status; -1 for a process a signal ended.
func (p *proc) code() int {
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// kill sends SIGKILL.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
}

// report is what rc_pingpong prints after a successful run.
type report struct {
	bytes   int64
	iters   int
	seconds float64
	mbits   float64
	usec    float64
}

// parseRun checks a successful run's output: the two address lines (the
// local GID must be the IPv4-mapped local address, the remote the peer's)
// and the two result lines. It returns the results.
func parseRun(t testing.TB, p *proc, local, remote string) report {
	t.Helper()
	out := p.stdout.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%s printed %d lines, want 4:\n%s", p.name, len(lines), out)
	}
	for i, want := range []string{"  local address:  ", "  remote address: "} {
		gid := "GID ::ffff:" + []string{local, remote}[i]
		if !strings.HasPrefix(lines[i], want) || !strings.HasSuffix(lines[i], gid) {
			t.Errorf("%s line %d = %q, want %q…%q", p.name, i+1, lines[i], want, gid)
		}
	}
	var r report
	var secs float64
	if _, err := fmt.Sscanf(lines[2], "%d bytes in %f seconds = %f Mbit/sec", &r.bytes, &r.seconds, &r.mbits); err != nil {
		t.Fatalf("%s line 3 = %q: %v", p.name, lines[2], err)
	}
	if _, err := fmt.Sscanf(lines[3], "%d iters in %f seconds = %f usec/iter", &r.iters, &secs, &r.usec); err != nil {
		t.Fatalf("%s line 4 = %q: %v", p.name, lines[3], err)
	}
	return r
}

// counters parses the line GOROCE_PRINT_COUNTERS=1 makes rc_pingpong
// print on stderr at exit: "counters: name=value ...". It returns the
// counters and the rest of stderr.
func counters(t testing.TB, p *proc) (map[string]uint64, string) {
	t.Helper()
	var rest strings.Builder
	var c map[string]uint64
	for line := range strings.Lines(p.stderr.String()) {
		fields, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "counters: ")
		if !ok || c != nil {
			rest.WriteString(line)
			continue
		}
		c = map[string]uint64{}
		for _, f := range strings.Fields(fields) {
			name, v, ok := strings.Cut(f, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				t.Fatalf("%s: counters line %q: bad field %q", p.name, line, f)
			}
			c[name] = n
		}
	}
	if c == nil {
		t.Fatalf("%s printed no counters line; stderr:\n%s", p.name, p.stderr)
	}
	return c, rest.String()
}
