package pingpong

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// parseAddressLine reads what follows "local address: " in the output of
// rc_pingpong, or of ud_pingpong, which has a colon before the GID in its
// local address line; it returns the separator it found: ", " or ": ".
func parseAddressLine(s string) (dest, string, error) {
	sep := ", "
	if strings.Contains(s, ": GID ") {
		sep, s = ": ", strings.Replace(s, ": GID ", ", GID ", 1)
	}
	d, err := scanAddress(s)
	return d, sep, err
}

func scanAddress(s string) (dest, error) {
	var d dest
	var g string
	if _, err := fmt.Sscanf(s, "LID 0x%x, QPN 0x%x, PSN 0x%x, GID %s", &d.LID, &d.QPN, &d.PSN, &g); err != nil {
		return d, err
	}
	a, err := netip.ParseAddr(g)
	if err != nil {
		return d, err
	}
	d.GID = a.As16()
	return d, nil
}

// output is the output of rc_pingpong, uc_pingpong or ud_pingpong,
// parsed.
type output struct {
	local, remote dest
	localSep      string // before the GID in the local address line: ", ", or ": " from ud_pingpong
	bytes         int64
	iters         int
	seconds       float64
	mbits         float64
	usecPerIter   float64
}

// parseOutput parses and checks the four lines of a successful run.
func parseOutput(t *testing.T, who, out string) output {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%s printed %d lines, want 4:\n%s", who, len(lines), out)
	}
	var o output
	var err error
	for i, x := range []struct {
		label string
		d     *dest
	}{{"  local address:  ", &o.local}, {"  remote address: ", &o.remote}} {
		rest, ok := strings.CutPrefix(lines[i], x.label)
		if !ok {
			t.Fatalf("%s line %d = %q, want it to start with %q", who, i+1, lines[i], x.label)
		}
		var sep string
		if *x.d, sep, err = parseAddressLine(rest); err != nil {
			t.Fatalf("%s line %d = %q: %v", who, i+1, lines[i], err)
		}
		if i == 0 {
			o.localSep = sep
		} else if sep != ", " {
			t.Errorf("%s line 2 = %q: want \", GID\" in every tool's remote address line", who, lines[i])
		}
	}
	var secs2 float64
	if _, err := fmt.Sscanf(lines[2], "%d bytes in %f seconds = %f Mbit/sec", &o.bytes, &o.seconds, &o.mbits); err != nil {
		t.Fatalf("%s line 3 = %q: %v", who, lines[2], err)
	}
	if _, err := fmt.Sscanf(lines[3], "%d iters in %f seconds = %f usec/iter", &o.iters, &secs2, &o.usecPerIter); err != nil {
		t.Fatalf("%s line 4 = %q: %v", who, lines[3], err)
	}
	if secs2 != o.seconds {
		t.Errorf("%s: %v seconds in line 3, %v in line 4", who, o.seconds, secs2)
	}
	return o
}

// checkPair checks that a server's and a client's outputs agree with each
// other and with the run's parameters.
func checkPair(t *testing.T, srv, cli output, size, iters int, srvAddr, cliAddr string) {
	t.Helper()
	if srv.local != cli.remote || cli.local != srv.remote {
		t.Errorf("addresses do not mirror: server %+v / %+v, client %+v / %+v", srv.local, srv.remote, cli.local, cli.remote)
	}
	if got, want := srv.local.GID, gid("::ffff:"+srvAddr); got != want {
		t.Errorf("server GID %s, want %s", ntop6(got), ntop6(want))
	}
	if got, want := cli.local.GID, gid("::ffff:"+cliAddr); got != want {
		t.Errorf("client GID %s, want %s", ntop6(got), ntop6(want))
	}
	for _, o := range []output{srv, cli} {
		if o.local.LID != 0 || o.local.QPN < 0x11 || o.local.PSN > 0xffffff {
			t.Errorf("local address %+v: want LID 0, QPN from 0x11, a 24-bit PSN", o.local)
		}
		if o.bytes != int64(size)*int64(iters)*2 || o.iters != iters {
			t.Errorf("%d bytes, %d iters; want %d, %d", o.bytes, o.iters, int64(size)*int64(iters)*2, iters)
		}
		if o.seconds <= 0 && o.usecPerIter <= 0 {
			t.Errorf("no time measured: %+v", o)
		}
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// parseCounters finds the line GOROCE_PRINT_COUNTERS=1 prints in stderr
// and returns its counters.
func parseCounters(t *testing.T, who, stderr string) map[string]uint64 {
	t.Helper()
	for line := range strings.Lines(stderr) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "counters: ")
		if !ok {
			continue
		}
		c := map[string]uint64{}
		for _, f := range strings.Fields(rest) {
			name, v, ok := strings.Cut(f, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil {
				t.Fatalf("%s: counters line %q: bad field %q", who, line, f)
			}
			c[name] = n
		}
		return c
	}
	t.Fatalf("%s printed no counters line: %q", who, stderr)
	return nil
}
