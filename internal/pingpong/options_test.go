package pingpong

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

func TestParseOptions(t *testing.T) {
	def := defaultOptions(verbs.QPTypeRC)
	for _, tc := range []struct {
		name string
		args []string
		want func(o *options)
	}{
		{"defaults", nil, func(o *options) {}},
		{"short", []string{"-p", "1234", "-d", "127.0.0.2", "-i", "1", "-s", "64", "-m", "4096", "-r", "10", "-n", "5",
			"-l", "3", "-e", "-g", "1", "-c", "-N", "host"}, func(o *options) {
			o.port, o.dev, o.size, o.mtu, o.rxDepth, o.iters, o.sl, o.events, o.gidIdx, o.chk, o.newSend, o.server =
				1234, netip.MustParseAddr("127.0.0.2"), 64, verbs.MTU4096, 10, 5, 3, true, 1, true, true, "host"
		}},
		{"attached and bundled", []string{"-s64", "-ecn5", "-p0x10"}, func(o *options) {
			o.size, o.events, o.chk, o.iters, o.port = 64, true, true, 5, 16
		}},
		{"long forms", []string{"--size=64", "--iters", "5", "--ib-dev=::1", "--mtu", "512", "--events", "--chk", "--gid-idx=0"}, func(o *options) {
			o.size, o.iters, o.dev, o.mtu, o.events, o.chk, o.gidIdx = 64, 5, netip.MustParseAddr("::1"), verbs.MTU512, true, true, 0
		}},
		{"abbreviated long", []string{"--si=64", "--rx=7", "--new"}, func(o *options) { o.size, o.rxDepth, o.newSend = 64, 7, true }},
		{"operand first", []string{"10.0.0.1", "-n", "3"}, func(o *options) { o.server, o.iters = "10.0.0.1", 3 }},
		{"double dash", []string{"-n", "3", "--", "-host"}, func(o *options) { o.server, o.iters = "-host", 3 }},
		{"octal", []string{"-s", "010"}, func(o *options) { o.size = 8 }},
		{"timeout", []string{"--timeout=250ms"}, func(o *options) { o.timeout = 250 * time.Millisecond }},
		{"timeout seconds", []string{"--timeout", "1.5"}, func(o *options) { o.timeout = 1500 * time.Millisecond }},
		{"iodp", []string{"-O"}, func(o *options) { o.odp, o.iodp = true, true }},
		{"fault", []string{"--fault", "reorder=25%,dup=1%,delay=1ms,seed=7"}, func(o *options) { o.fault = "reorder=25%,dup=1%,delay=1ms,seed=7" }},
		{"fault abbreviated", []string{"--fa=rule=drop:ack:once"}, func(o *options) { o.fault = "rule=drop:ack:once" }},
		{"fault empty", []string{"--fault="}, func(o *options) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := def
			tc.want(&want)
			got, err := parseOptions(verbs.QPTypeRC, tc.args)
			if err != nil {
				t.Fatalf("parseOptions(%q): %v", tc.args, err)
			}
			if got != want {
				t.Fatalf("parseOptions(%q)\n got %+v\nwant %+v", tc.args, got, want)
			}
		})
	}
}

func TestParseOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-x"}, "invalid option -- 'x'"},
		{[]string{"-s"}, "option requires an argument -- 's'"},
		{[]string{"--size"}, "option '--size' requires an argument"},
		{[]string{"--events=1"}, "option '--events' doesn't allow an argument"},
		{[]string{"--bogus"}, "unrecognized option '--bogus'"},
		{[]string{"--i=1"}, "option '--i' is ambiguous"},
		{[]string{"-m", "1000"}, "want 256, 512, 1024, 2048 or 4096"},
		{[]string{"-m", "8192"}, "want an integer in 256..4096"},
		{[]string{"-p", "70000"}, "want an integer in 0..65535"},
		{[]string{"-s", "12k"}, `-s "12k"`},
		{[]string{"-i", "0"}, "want an integer in 1..255"},
		{[]string{"-d", "mlx5_0"}, "goroce names a device by the IP address it binds"},
		{[]string{"a", "b"}, "more than one host"},
		{[]string{"--timeout=0"}, "want a positive duration"},
		{[]string{"--fault=drop=200%"}, `--fault: link: bad fault configuration: "drop=200%": probability outside 0..100%`},
		{[]string{"--fault", "reorder=25%,bogus=1"}, `unknown key "bogus"`},
		{[]string{"--fault"}, "option '--fault' requires an argument"},
	} {
		_, err := parseOptions(verbs.QPTypeRC, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseOptions(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestUnsupported checks that options goroce cannot honour fail at once,
// with a message, before any device is opened.
func TestUnsupported(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o"}, "does not support on-demand paging"},
		{[]string{"-O"}, "does not support on-demand paging"},
		{[]string{"-P"}, "-P needs -o or -O"},
		{[]string{"-o", "-P"}, "does not support on-demand paging"},
		{[]string{"-t"}, "does not support completion timestamps"},
		{[]string{"--dm"}, "has no device memory"},
		{[]string{"-o", "-j"}, "-j excludes -o and -O"},
		{[]string{"-U"}, "CoCo unprotected memory (-U)"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), "rc_pingpong", append(tc.args, "-d", "192.0.2.1"), &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1, nothing, %q", tc.args, code, stdout.String(), stderr.String(), tc.want)
		}
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), "rc_pingpong", []string{"-h"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.HasPrefix(stdout.String(), "Usage:\n  rc_pingpong [options]          run the server") ||
		!strings.Contains(stdout.String(), "default 127.0.0.1") {
		t.Errorf("usage text:\n%s", stdout.String())
	}
	if got := stderr.String(); got != "rc_pingpong: invalid option -- 'h'\n" {
		t.Errorf("stderr %q", got)
	}
	if !errors.Is(func() error { _, err := parseOptions(verbs.QPTypeRC, []string{"-s", "x"}); return err }(), errUsage) {
		t.Error("a bad number is not an errUsage")
	}
}

// TestParseOptionsUD checks ud_pingpong's command line: optstring
// "p:d:i:s:r:n:l:eg:c", a default size of 1024, and none of rc_pingpong's
// -m, -N or memory options.
func TestParseOptionsUD(t *testing.T) {
	def := defaultOptions(verbs.QPTypeUD)
	if def.size != 1024 || def.kind != verbs.QPTypeUD || def.rxDepth != 500 || def.iters != 1000 || def.port != 18515 {
		t.Fatalf("defaults %+v: want size 1024, UD, rx-depth 500, 1000 iters, port 18515", def)
	}
	for _, tc := range []struct {
		name string
		args []string
		want func(o *options)
	}{
		{"defaults", nil, func(o *options) {}},
		{"short", []string{"-p", "1234", "-d", "127.0.0.2", "-i", "1", "-s", "64", "-r", "10", "-n", "5",
			"-l", "3", "-e", "-g", "1", "-c", "host"}, func(o *options) {
			o.port, o.dev, o.size, o.rxDepth, o.iters, o.sl, o.events, o.gidIdx, o.chk, o.server =
				1234, netip.MustParseAddr("127.0.0.2"), 64, 10, 5, 3, true, 1, true, "host"
		}},
		{"long forms", []string{"--size=64", "--iters", "5", "--rx-depth=7", "--sl=2", "--events", "--chk", "--gid-idx=0", "--ib-port=1"}, func(o *options) {
			o.size, o.iters, o.rxDepth, o.sl, o.events, o.chk, o.gidIdx = 64, 5, 7, 2, true, true, 0
		}},
		{"abbreviated", []string{"--si=64", "--ev", "--ite=3"}, func(o *options) { o.size, o.events, o.iters = 64, true, 3 }},
		{"timeout and fault", []string{"--timeout=1s", "--fault=drop=1%"}, func(o *options) { o.timeout, o.fault = time.Second, "drop=1%" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := def
			tc.want(&want)
			got, err := parseOptions(verbs.QPTypeUD, tc.args)
			if err != nil {
				t.Fatalf("parseOptions(%q): %v", tc.args, err)
			}
			if got != want {
				t.Fatalf("parseOptions(%q)\n got %+v\nwant %+v", tc.args, got, want)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-m", "1024"}, "invalid option -- 'm'"},
		{[]string{"--mtu=1024"}, "unrecognized option '--mtu'"},
		{[]string{"-N"}, "invalid option -- 'N'"},
		{[]string{"--new_send"}, "unrecognized option '--new_send'"},
		{[]string{"-o"}, "invalid option -- 'o'"},
		{[]string{"-O"}, "invalid option -- 'O'"},
		{[]string{"-P"}, "invalid option -- 'P'"},
		{[]string{"-t"}, "invalid option -- 't'"},
		{[]string{"-j"}, "invalid option -- 'j'"},
		{[]string{"-U"}, "invalid option -- 'U'"},
		{[]string{"--i=1"}, "option '--i' is ambiguous"},
		{[]string{"-s", "-1"}, "want an integer in 0..2147483648"},
		{[]string{"-p", "65536"}, "want an integer in 0..65535"},
		{[]string{"-d", "rxe0"}, "goroce names a device by the IP address it binds"},
		{[]string{"h1", "h2"}, "more than one host"},
	} {
		_, err := parseOptions(verbs.QPTypeUD, tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseOptions(UD, %q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestUsageUD(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), verbs.QPTypeUD, "ud_pingpong", []string{"-m", "1024"}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	u := stdout.String()
	if !strings.HasPrefix(u, "Usage:\n  ud_pingpong [options]          run the server") ||
		!strings.Contains(u, "(default 1024)") || !strings.Contains(u, "at most the port's active MTU") {
		t.Errorf("usage text:\n%s", u)
	}
	for _, absent := range []string{"--mtu", "--new_send", "--odp", "--iodp", "--prefetch", "--ts", "--dm", "--allow-cc-unprotected", "%!"} {
		if strings.Contains(u, absent) {
			t.Errorf("ud_pingpong usage mentions %q:\n%s", absent, u)
		}
	}
	for _, opt := range []string{"--port", "--ib-dev", "--ib-port", "--size", "--rx-depth", "--iters", "--sl", "--events", "--gid-idx", "--chk", "--timeout", "--fault", "'reorder=25%,dup=1%,delay=1ms,seed=7'"} {
		if !strings.Contains(u, opt) {
			t.Errorf("ud_pingpong usage lacks %q", opt)
		}
	}
	if got := stderr.String(); got != "ud_pingpong: invalid option -- 'm'\n" {
		t.Errorf("stderr %q", got)
	}
	stdout.Reset()
	run(context.Background(), "rc_pingpong", []string{"-h"}, &stdout, &stderr)
	if u := stdout.String(); !strings.Contains(u, "--mtu") || !strings.Contains(u, "'reorder=25%,dup=1%,delay=1ms,seed=7'") || strings.Contains(u, "%!") {
		t.Errorf("rc_pingpong usage:\n%s", u)
	}
}

func TestRunKinds(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Run(context.Background(), verbs.QPType(9), "x", nil, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no ping-pong over") {
		t.Errorf("XRC: exit %d, stderr %q; want 1 and an error", code, stderr.String())
	}
}
