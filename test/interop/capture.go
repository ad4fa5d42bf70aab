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
