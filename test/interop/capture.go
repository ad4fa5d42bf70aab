package main

import (
	"bufio"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// capture runs tcpdump on the bridge into file until stop is called.
func capture(file string) (stop func(), err error) {
	cmd := exec.Command("ip", "netns", "exec", netns, "tcpdump", "-i", bridge, "-s", "0", "-U",
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

// flow counts a capture's RoCE packets, all or from one address to
// another, and those with a bad ICRC.
type flow struct{ packets, bad int }

var (
	icrcTotal = regexp.MustCompile(`(?m)^TOTAL roce_packets=(\d+) icrc_ok=\d+ icrc_bad=(\d+)$`)
	icrcFlow  = regexp.MustCompile(`(?m)^FLOW (\S+) -> (\S+) roce_packets=(\d+) icrc_ok=\d+ icrc_bad=(\d+)$`)
)

// parseICRC reads icrc-check.py's output: the total and the flows, by
// "src->dst".
func parseICRC(out string) (total flow, flows map[string]flow, ok bool) {
	m := icrcTotal.FindStringSubmatch(out)
	if m == nil {
		return flow{}, nil, false
	}
	total.packets, _ = strconv.Atoi(m[1])
	total.bad, _ = strconv.Atoi(m[2])
	flows = map[string]flow{}
	for _, m := range icrcFlow.FindAllStringSubmatch(out, -1) {
		var f flow
		f.packets, _ = strconv.Atoi(m[3])
		f.bad, _ = strconv.Atoi(m[4])
		flows[m[1]+"->"+m[2]] = f
	}
	return total, flows, true
}

// icrc runs the ICRC checker on pcap.
func (r *runner) icrc(pcap string) (total flow, flows map[string]flow, out string, err error) {
	b, _ := exec.Command("python3", filepath.Join(r.here, "icrc-check.py"), pcap).CombinedOutput()
	total, flows, ok := parseICRC(string(b))
	if !ok {
		return flow{}, nil, string(b), fmt.Errorf("icrc-check.py: %s", strings.TrimSpace(string(b)))
	}
	return total, flows, string(b), nil
}
