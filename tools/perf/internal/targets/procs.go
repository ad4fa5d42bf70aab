package targets

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/internal/bench"
	"github.com/goroce/goroce/internal/syncbuf"
)

// tool runs a perftest tool's server and client, each in its process, and
// returns the client's output and both processes' CPU time. The TCP port
// is picked free, and again if something took it before the server bound
// it.
func (r *targetRun) tool(name string, args ...string) (string, time.Duration, error) {
	for try := 0; ; try++ {
		port, err := bench.FreePort(nil)
		if err != nil {
			return "", 0, err
		}
		common := append([]string{"perftest", name, "-p", strconv.Itoa(port)}, args...)
		srv := append(append([]string{}, common...), "-d", r.cfg.Server.String())
		out, cpu, err := r.pair(r.goroceEnv, srv, "Waiting for client", func(string) ([]string, error) {
			return append(append([]string{}, common...), "-d", r.cfg.Client.String(), r.cfg.Server.String()), nil
		})
		if err != nil && try < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("%s %q: %w", name, args, err)
		}
		return out, cpu, nil
	}
}

// tcp runs a TCP end's server and its client, whose arguments follow the
// client's address and the server's address and port, and returns the
// client's output and both processes' CPU time.
func (r *targetRun) tcp(srv []string, client string, args ...string) (string, time.Duration, error) {
	out, cpu, err := r.pair(r.tcpEnv, srv, "\n", func(srvOut string) ([]string, error) {
		server, err := r.serverPort(srvOut)
		return append([]string{client, r.cfg.Client.String(), server}, args...), err
	})
	if err != nil {
		return "", 0, fmt.Errorf("TCP %s: %w", client, err)
	}
	return out, cpu, nil
}

// floor runs End's UDP ends, n ping-pongs of goroce's datagram between
// two bare processes, in the TCP ends' environment and places.
func (r *targetRun) floor(n string) (string, time.Duration, error) {
	out, cpu, err := r.pair(r.tcpEnv, []string{"udp-echo", r.cfg.Server.String(), n}, "\n", func(srvOut string) ([]string, error) {
		server, err := r.serverPort(srvOut)
		return []string{"udp-ping", r.cfg.Client.String(), server, n}, err
	})
	if err != nil {
		return "", 0, fmt.Errorf("UDP floor: %w", err)
	}
	return out, cpu, nil
}

// serverPort returns the server's address with the port its end printed
// ("port N"), as the client end's argument.
func (r *targetRun) serverPort(srvOut string) (string, error) {
	var port uint16
	if _, err := fmt.Sscanf(srvOut, "port %d\n", &port); err != nil {
		return "", fmt.Errorf("the server end printed %q, want \"port N\"", srvOut)
	}
	return netip.AddrPortFrom(r.cfg.Server, port).String(), nil
}

// pair starts the server end, waits until its output holds ready, starts
// the client end with the arguments client makes of that output, and
// waits for both to exit 0. It returns the client's output and both
// processes' CPU time.
func (r *targetRun) pair(env, srvArgs []string, ready string, client func(srvOut string) ([]string, error)) (string, time.Duration, error) {
	deadline := time.Now().Add(r.cfg.Timeout)
	s, err := r.start(true, env, srvArgs)
	if err != nil {
		return "", 0, err
	}
	defer s.kill()
	for !s.out.Contains(ready) {
		if s.exited() {
			return "", 0, fmt.Errorf("server exited before it was ready: %v: %s", s.err, s.errOut.String())
		}
		if time.Now().After(deadline) {
			return "", 0, fmt.Errorf("server not ready after %v", r.cfg.Timeout)
		}
		time.Sleep(time.Millisecond)
	}
	args, err := client(s.out.String())
	if err != nil {
		return "", 0, err
	}
	c, err := r.start(false, env, args)
	if err != nil {
		return "", 0, err
	}
	defer c.kill()
	for _, p := range []*endProc{c, s} {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			return "", 0, fmt.Errorf("not done after %v", r.cfg.Timeout)
		}
		if p.err != nil {
			return "", 0, fmt.Errorf("%q: %v: %s", p.cmd.Args, p.err, p.errOut.String())
		}
	}
	return c.out.String(), c.cpu() + s.cpu(), nil
}

// An endProc is a running end.
type endProc struct {
	cmd         *exec.Cmd
	out, errOut syncbuf.Buffer
	done        chan struct{} // closed when the process has exited and err is set
	err         error
}

// start starts an end, the server's if server, with env.
func (r *targetRun) start(server bool, env, args []string) (*endProc, error) {
	p := &endProc{cmd: r.cfg.Command(server, args...), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errOut
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *endProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process if it still runs, and waits for it.
func (p *endProc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// cpu is the process's user and system CPU time; it has exited.
func (p *endProc) cpu() time.Duration {
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}

// errNoFigure reports a TCP end's output without the figure looked for.
var errNoFigure = errors.New("no figure")

// endFigure returns the number after name in a TCP end's output
// ("MiB/s 1234.5").
func endFigure(out, name string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%w %q in %q", errNoFigure, name, out)
}
