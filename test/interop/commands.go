package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/goroce/goroce/internal/syncbuf"
)

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

// host returns the command that runs goroce's side of c, which prints
// its device's counters at exit (GOROCE_PRINT_COUNTERS=1).
func (r *runner) host(ctx context.Context, c cell, peer string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", r.hostCmd(c, peer)...)
	cmd.Env = append(os.Environ(), "GOROCE_PRINT_COUNTERS=1")
	return cmd
}

func (r *runner) hostCmd(c cell, peer string) []string {
	args := []string{"netns", "exec", netns, filepath.Join(r.bin, c.tool), "-d", hostIP}
	if c.kind != "pp" {
		args = append(args, "-F")
	}
	args = append(args, c.args...)
	args = append(args, c.hostArgs...)
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

// rxeCounters reads the guest's rxe0 port counters (nil if it cannot).
func (r *runner) rxeCounters() map[string]uint64 {
	b, err := exec.Command(filepath.Join(r.here, "guest-run.sh"), "A", "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *").Output()
	if err != nil {
		return nil
	}
	return parseHWCounters(string(b))
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
