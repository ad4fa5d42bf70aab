package pingpong

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTwoProcesses builds rc_pingpong and runs a server and a client as
// two processes on one host (127.0.0.3 and 127.0.0.4), with 1000
// exchanges of 1 MiB checked with -c; then the same for uc_pingpong with
// 200 exchanges of 64 KiB, and for ud_pingpong with 1000 datagrams of
// 4096 bytes, the loopback port's active MTU.
func TestTwoProcesses(t *testing.T) {
	for _, tc := range []struct {
		tool        string
		size, iters int
	}{{"rc_pingpong", 1 << 20, 1000}, {"uc_pingpong", 64 << 10, 200}, {"ud_pingpong", 4096, 1000}} {
		t.Run(tc.tool, func(t *testing.T) { twoProcesses(t, tc.tool, tc.size, tc.iters) })
	}
}

func twoProcesses(t *testing.T, tool string, size, iters int) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build %s: %v", tool, err)
	}
	bin := filepath.Join(t.TempDir(), tool)
	if out, err := exec.Command(gobin, "build", "-o", bin, "../../cmd/"+tool).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	port := fmt.Sprint(freePort(t))
	common := []string{"-p", port, "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters), "-c"}

	srv := exec.CommandContext(ctx, bin, append([]string{"-d", "127.0.0.3"}, common...)...)
	var srvErr bytes.Buffer
	srv.Stderr = &srvErr
	pipe, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The server prints its address once it listens.
	r := bufio.NewReader(pipe)
	first, err := r.ReadString('\n')
	if err != nil {
		srv.Wait()
		t.Fatalf("server: %v; stderr: %s", err, srvErr.String())
	}

	cli := exec.CommandContext(ctx, bin, append([]string{"-d", "127.0.0.4"}, append(common, "127.0.0.3")...)...)
	var cliOut, cliErr bytes.Buffer
	cli.Stdout, cli.Stderr = &cliOut, &cliErr
	t0 := time.Now()
	cliRunErr := cli.Run()
	rest, _ := readAll(r)
	srvRunErr := srv.Wait()
	t.Logf("wall time %v", time.Since(t0).Round(time.Millisecond))
	if cliRunErr != nil || srvRunErr != nil {
		t.Fatalf("server: %v\n%s%s%s\nclient: %v\n%s%s", srvRunErr, first, rest, srvErr.String(), cliRunErr, cliOut.String(), cliErr.String())
	}
	s, c := parseOutput(t, "server", first+rest), parseOutput(t, "client", cliOut.String())
	checkPair(t, s, c, size, iters, "127.0.0.3", "127.0.0.4")
	if want := map[bool]string{true: ": ", false: ", "}[tool == "ud_pingpong"]; s.localSep != want || c.localSep != want {
		t.Errorf("local address lines use %q and %q before the GID, want %q", s.localSep, c.localSep, want)
	}
	t.Logf("server:\n%s%s", first, rest)
	t.Logf("client:\n%s", cliOut.String())
	if srvErr.Len() != 0 || cliErr.Len() != 0 {
		t.Errorf("stderr not empty: server %q, client %q", srvErr.String(), cliErr.String())
	}
}

func readAll(r *bufio.Reader) (string, error) {
	var b strings.Builder
	_, err := r.WriteTo(&b)
	return b.String(), err
}
