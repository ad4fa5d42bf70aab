package perftest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/syncbuf"
)

// TestMain lets the test binary play a tool: with GOROCE_TEST_TOOL set, it
// runs that perftest tool with the remaining arguments and exits, so the
// process tests run real server and client processes without a build.
func TestMain(m *testing.M) {
	if name := os.Getenv("GOROCE_TEST_TOOL"); name != "" {
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		os.Exit(Main(Tools[name], args, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// hosts hands out loopback address pairs (127.0.6.x) to the process tests.
var hosts atomic.Uint32

// freePort returns a TCP port that was free a moment ago on every
// address, as the server binds it: a port free on 127.0.0.1 alone may be
// the source port of another address's connection that is still closing
// (a benchmark's), and the server's bind then fails.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proc is a tool process of a test.
type proc struct {
	cmd      *exec.Cmd
	out, err *syncbuf.Buffer
	done     chan struct{}
	waitErr  error
}

// start runs the test binary as the named tool.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "GOROCE_TEST_TOOL="+name)
	p := &proc{cmd: cmd, out: &syncbuf.Buffer{}, err: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waitErr = cmd.Wait(); close(p.done) }()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) kill() { p.cmd.Process.Kill(); <-p.done }

// runPair runs a server and a client process of a tool and returns their
// outputs; both must exit 0. The TCP port is picked free, and picked again
// if another test took it before the server could bind it.
func runPair(t *testing.T, name string, args ...string) (srv, cli string) {
	t.Helper()
	n := hosts.Add(2)
	sa, ca := fmt.Sprintf("127.0.6.%d", n-1), fmt.Sprintf("127.0.6.%d", n)
	var s *proc
	var port string
	for try := 0; ; try++ {
		port = strconv.Itoa(freePort(t))
		s = start(t, name, append([]string{"-p", port, "-d", sa}, args...)...)
		// The server listens before it prints its banner.
		for deadline := time.Now().Add(20 * time.Second); !s.exited() && time.Now().Before(deadline) &&
			!strings.Contains(s.out.String(), "Waiting for client"); {
			time.Sleep(5 * time.Millisecond)
		}
		if strings.Contains(s.out.String(), "Waiting for client") {
			break
		}
		s.kill()
		if try < 3 && strings.Contains(s.err.String(), "address already in use") {
			continue
		}
		t.Fatalf("server did not start: %s%s", s.out, s.err)
	}
	defer s.kill()
	c := start(t, name, append([]string{"-p", port, "-d", ca}, append(args, sa)...)...)
	defer c.kill()
	timer := time.AfterFunc(120*time.Second, func() { c.cmd.Process.Kill(); s.cmd.Process.Kill() })
	defer timer.Stop()
	<-c.done
	<-s.done
	if c.waitErr != nil || s.waitErr != nil {
		t.Fatalf("%s %q: client %v, server %v\nclient:\n%s%s\nserver:\n%s%s", name, args, c.waitErr, s.waitErr, c.out, c.err, s.out, s.err)
	}
	return s.out.String(), c.out.String()
}

// table returns the rows of a report's table, each split into fields.
func table(t *testing.T, out string, header string) [][]float64 {
	t.Helper()
	i := strings.Index(out, header+"\n")
	if i < 0 {
		t.Fatalf("no table header %q in:\n%s", header, out)
	}
	var rows [][]float64
	sc := bufio.NewScanner(strings.NewReader(out[i+len(header)+1:]))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "---") {
			break
		}
		var row []float64
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil {
				t.Fatalf("row %q: field %q: %v", line, f, err)
			}
			row = append(row, v)
		}
		rows = append(rows, row)
	}
	return rows
}

// TestTools runs every tool as a server and a client process on one host,
// with the options users rely on, and checks the tables.
func TestTools(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args []string
		rows int // table rows the client prints
	}{
		{"ib_write_bw", []string{"-n", "200", "-s", "65536"}, 1},
		{"ib_read_bw", []string{"-n", "200", "-s", "4096"}, 1},
		{"ib_send_bw", []string{"-n", "200", "-s", "4096"}, 1},
		{"ib_atomic_bw", []string{"-n", "200"}, 1},
		{"ib_write_lat", []string{"-n", "200"}, 1},
		{"ib_read_lat", []string{"-n", "200"}, 1},
		{"ib_send_lat", []string{"-n", "200"}, 1},
		{"ib_atomic_lat", []string{"-n", "200", "-A", "CMP_AND_SWAP"}, 1},
		{"ib_write_bw", []string{"-a", "-n", "5"}, 23},
		{"ib_read_bw", []string{"-a", "-n", "5"}, 23},
		{"ib_send_bw", []string{"-a", "-n", "5"}, 23},
		{"ib_write_lat", []string{"-a", "-n", "5"}, 23}, // the peer's first WRITE of a size may land early
		{"ib_send_lat", []string{"-a", "-n", "5"}, 23},
		{"ib_write_bw", []string{"-q", "4", "-n", "100", "-s", "8192"}, 1},
		{"ib_read_bw", []string{"-q", "4", "-n", "100", "-s", "8192"}, 1},
		{"ib_send_bw", []string{"-q", "4", "-n", "100", "-s", "8192"}, 1},
		{"ib_atomic_bw", []string{"-q", "4", "-n", "100"}, 1},
		// QPs in three words of the client's set of QPs with room, each
		// refilled many times: one the set lost would never finish.
		{"ib_write_bw", []string{"-q", "130", "-n", "24", "-s", "1024", "-t", "4", "-l", "2"}, 1},
		{"ib_write_bw", []string{"-b", "-n", "200", "-s", "8192"}, 1},
		{"ib_read_bw", []string{"-b", "-n", "200", "-s", "8192"}, 1},
		{"ib_send_bw", []string{"-b", "-n", "200", "-s", "8192"}, 1},
		{"ib_atomic_bw", []string{"-b", "-n", "200"}, 1},
		{"ib_write_bw", []string{"-D", "2", "-s", "8192"}, 1},
		{"ib_read_bw", []string{"-D", "2", "-s", "8192"}, 1},
		{"ib_send_bw", []string{"-D", "2", "-s", "8192"}, 1},
		{"ib_atomic_bw", []string{"-D", "2"}, 1},
		{"ib_write_lat", []string{"-D", "2"}, 1},
		{"ib_write_bw", []string{"--report_gbits", "-n", "100", "-m", "1024", "-l", "4", "-Q", "2"}, 1},
		{"ib_write_bw", []string{"-c", "UC", "-n", "200", "-s", "8192"}, 1},
		{"ib_send_bw", []string{"-c", "UC", "-n", "200", "-s", "8192"}, 1},
		{"ib_send_bw", []string{"-c", "UD", "-n", "200", "-s", "1024"}, 1},
		{"ib_send_bw", []string{"-c", "UD", "-a", "-n", "20"}, 12}, // 2 … 4096, the loopback MTU
		{"ib_send_lat", []string{"-c", "UD", "-n", "200"}, 1},
		{"ib_write_lat", []string{"-c", "UC", "-n", "200"}, 1},
	} {
		t.Run(tc.tool+strings.Join(tc.args, ""), func(t *testing.T) {
			p, err := Parse(Tools[tc.tool], tc.args)
			if err != nil {
				t.Fatal(err)
			}
			srv, cli := runPair(t, tc.tool, tc.args...)
			hdr := resultFmt
			switch {
			case p.Kind == Lat && p.Duration > 0:
				hdr = resultFmtDur
			case p.Kind == Lat:
				hdr = resultFmtLat
			case p.Gbits:
				hdr = resultFmtG
			}
			rows := table(t, cli, hdr)
			if len(rows) != tc.rows {
				t.Fatalf("client printed %d rows, want %d:\n%s", len(rows), tc.rows, cli)
			}
			for i, r := range rows {
				checkRow(t, p, r, i)
			}
			if p.Kind == BW || p.Verb == Write || p.Verb == Send {
				srows := table(t, srv, hdr)
				if len(srows) == 0 {
					t.Fatalf("server printed no row:\n%s", srv)
				}
			}
			if !strings.Contains(cli, " remote address: LID 0000") || !strings.Contains(srv, " local address: LID 0000") {
				t.Errorf("address lines missing:\n%s\n%s", cli, srv)
			}
		})
	}
}

// checkRow checks a row's numbers are plausible: the size, the iteration
// count, positive rates and ordered latencies.
func checkRow(t *testing.T, p *Params, r []float64, i int) {
	t.Helper()
	size := float64(p.Size)
	if p.All {
		size = float64(int(2) << i)
	}
	if r[0] != size {
		t.Errorf("row %d: size %v, want %v", i, r[0], size)
	}
	iters := float64(p.Iters * p.QPs)
	switch {
	case p.Kind == BW && p.Duration == 0:
		if r[1] != iters || r[3] < 0 || r[4] <= 0 || r[2] != 0 && r[2] < r[3]*0.5 {
			t.Errorf("row %d: %v: want %v iterations and positive rates", i, r, iters)
		}
	case p.Kind == BW:
		if r[1] <= 0 || r[3] <= 0 {
			t.Errorf("row %d: %v: a timed run measures iterations and bandwidth", i, r)
		}
	case p.Duration > 0:
		if r[1] <= 0 || r[2] <= 0 || r[3] <= 0 {
			t.Errorf("row %d: %v", i, r)
		}
	default: // t_min ≤ t_typical ≤ t_max, t_min ≤ t_avg, percentiles ordered
		if r[1] != float64(p.Iters) || !(r[2] > 0 && r[2] <= r[4] && r[4] <= r[3] && r[2] <= r[5] && r[7] <= r[8]) {
			t.Errorf("row %d: %v", i, r)
		}
	}
}

// TestRateLimit: perftest's software rate limiter keeps the average at or
// below the limit (a slower machine can only lower it), with one QP and
// with several sharing the bursts.
func TestRateLimit(t *testing.T) {
	for _, qps := range []int{1, 3} {
		t.Run(fmt.Sprint(qps), func(t *testing.T) {
			args := []string{"-q", fmt.Sprint(qps), "-n", fmt.Sprint(300 / qps), "-s", "4096",
				"--rate_limit=0.05", "--rate_limit_type=SW"} // 0.05 Gb/s = 5.96 MiB/s
			_, cli := runPair(t, "ib_write_bw", args...)
			rows := table(t, cli, resultFmt)
			if len(rows) != 1 || rows[0][1] != 300 {
				t.Fatalf("rows %v", rows)
			}
			if limit := 0.05e9 / 8 / (1 << 20); rows[0][3] > limit*1.5 || rows[0][3] <= 0 {
				t.Errorf("average %v MiB/s with a limit of %.2f MiB/s", rows[0][3], limit)
			}
		})
	}
}
