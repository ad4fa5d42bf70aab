package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

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

// one runs a cell in one direction once.
func (r *runner) one(c cell, dir, tag string) result {
	res := result{c: c, dir: dir, status: "FAIL"}
	if _, err := os.Stat(filepath.Join(r.bin, c.tool)); err != nil {
		res.status = "PEND"
		res.note = "goroce has no cmd/" + c.tool + " yet"
		return res
	}
	base := filepath.Join(r.out, tag)
	var l *loss
	var rxe0 map[string]uint64
	if c.loss > 0 {
		rxe0 = r.rxeCounters()
		var err error
		if l, err = startLoss(c.loss); err != nil {
			res.note = err.Error()
			return res
		}
		defer l.stop()
	}
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
	var nc nftCounts
	var ncErr error
	if l != nil {
		nc, ncErr = l.counters()
		l.stop()
	}
	_ = os.WriteFile(base+".client.txt", []byte(cliOut), 0o644)
	_ = os.WriteFile(base+".server.txt", []byte(srvOut), 0o644)
	goOut, guestOut := cliOut, srvOut
	if dir == "A->go" {
		goOut, guestOut = srvOut, cliOut
	}
	if errors.Is(err, errPending) {
		res.status = "PEND"
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
	total, flows, icrcOut, err := r.icrc(pcap)
	_ = os.WriteFile(base+".icrc.txt", []byte(icrcOut), 0o644)
	res.packets, res.bad = total.packets, total.bad
	switch {
	case err != nil:
		notes = append(notes, err.Error())
	case total.packets == 0:
		notes = append(notes, "no RoCE packets captured")
	case c.loss > 0:
		// A loss cell's corrupted packets from the guest are captured
		// with their bad ICRCs; lossCheck bounds them.
	case total.bad > 0:
		notes = append(notes, fmt.Sprintf("%d bad ICRCs", total.bad))
	}
	// What the run lost and how it recovered, pass or fail.
	var info []string
	if l != nil {
		if ncErr != nil {
			notes = append(notes, ncErr.Error())
		} else {
			_ = os.WriteFile(base+".nft.txt", []byte(lossSummary(nc)+"\n"), 0o644)
			if err == nil {
				notes = append(notes, lossCheck(nc, flows[hostIP+"->"+guestIP], flows[guestIP+"->"+hostIP])...)
			}
			info = append(info, lossSummary(nc))
		}
	}
	if n := recoveryNote("goroce", parseCounters(goOut)); n != "" {
		info = append(info, n)
	}
	if rxe0 != nil {
		if rxe1 := r.rxeCounters(); rxe1 != nil {
			for k := range rxe1 {
				rxe1[k] -= rxe0[k]
			}
			if n := recoveryNote("rxe", rxe1); n != "" {
				info = append(info, n)
			}
		}
	}
	if len(notes) == 0 {
		res.status = "PASS"
	} else if w := clockWarning(guestOut); w != "" {
		notes = append(notes, w)
	}
	res.note = strings.Join(append(notes, info...), "; ")
	return res
}

func isPending(out string) bool {
	return strings.Contains(out, "does not support") || strings.Contains(out, "not supported")
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
	h, err := start(r.host(ctx, c, guestIP))
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
	h, err := start(r.host(ctx, c, ""))
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
