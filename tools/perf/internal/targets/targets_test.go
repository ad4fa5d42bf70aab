package targets

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTargetVerdict(t *testing.T) {
	for _, tc := range []struct {
		t    target
		v    float64
		want string
	}{
		{targetBW, 1.32, "met"},
		{targetBW, 1.2, "met"},
		{targetBW, 1.0, "1.20x short"},
		{targetVeth, 1.2, "1.08x short"},
		{targetCPU, 0.88, "met"},
		{targetCPU, 1.15, "1.15x short"},
		{targetLat, 0.5, "met"},
		{targetLat, 1.0, "2.00x short"},
		{targetRate, 1.2, "1.25x short"},
		{targetQPs, 0.85, "1.06x short"},
		{targetQPs, 0.898, "1.002x short"},
		{targetQPs, 0, "not measured"},
		{targetLat, -1, "not measured"},
	} {
		if got := tc.t.verdict(tc.v); got != tc.want {
			t.Errorf("%s, %v: %q, want %q", tc.t.goal, tc.v, got, tc.want)
		}
	}
}

// TestPrintTargets: the summary's rows carry each figure's median and
// range, the ratio's median taken within each round, and the verdict of
// the median ratio; each QP row's ratio is against the one-QP run next to
// it (QPRef), not the round's first one QP (the third round's 16 QPs:
// 0.91x, not 1.00x).
func TestPrintTargets(t *testing.T) {
	cfg := Config{QPs: []int{16, 1024}}
	rounds := []*Round{
		{BW: 2000, TCPBW: 1000, CPUPerGB: 0.9, TCPCPUPerGB: 1, Lat: 8, TCPLat: 8, TCPSpinLat: 5, FloorLat: 4, Rate: 1.2, QPBW: []float64{1800, 1000}, QPRef: []float64{2000, 2000}},
		{BW: 3000, TCPBW: 2000, CPUPerGB: 0.8, TCPCPUPerGB: 1, Lat: 9, TCPLat: 10, TCPSpinLat: 6, FloorLat: 5, Rate: 1.6, QPBW: []float64{2400, 2850}, QPRef: []float64{3000, 3000}},
		{BW: 1000, TCPBW: 1000, CPUPerGB: 1.2, TCPCPUPerGB: 1, Lat: 6, TCPLat: 4, TCPSpinLat: 3, FloorLat: 3, Rate: 1.4, QPBW: []float64{1000, 800}, QPRef: []float64{1100, 1000}},
	}
	var b bytes.Buffer
	Print(&b, cfg, rounds)
	out := b.String()
	for _, want := range []string{
		"3 rounds: medians (min–max); each ratio is taken within its round",
		"ib_write_bw 65536 B, 1 QP [MiB/s]      ≥ 1.2x TCP   2000 (1000–3000)         1000 (1000–2000)         1.50x (1.00x–2.00x)  met",
		"CPU seconds per GB, both processes     ≤ 1x TCP     0.90 (0.80–1.20)         1.00 (1.00–1.00)         0.90x (0.80x–1.20x)  met",
		"ib_write_lat 2 B t_typical [usec]      ≤ 0.5x TCP   8.00 (6.00–9.00)         8.00 (4.00–10.00)        1.00x (0.90x–1.50x)  2.00x short",
		"  the same, TCP's readers spinning                  8.00 (6.00–9.00)         5.00 (3.00–6.00)         1.60x (1.50x–2.00x)  (reference)",
		"  the same, bare UDP (kernel's floor)               8.00 (6.00–9.00)         4.00 (3.00–5.00)         2.00x (1.80x–2.00x)  (reference)",
		"   (goroce's own part, its time less the floor: 4.00 us one way)",
		"ib_write_bw 64 B [M msg/s]             ≥ 1.5 M/s    1.40 (1.20–1.60)",
		"1.07x short",
		"ib_write_bw 65536 B, 16 QPs [MiB/s]    ≥ 0.9x 1 QP  1800 (1000–2400)                                  0.90x (0.80x–0.91x)  met",
		"ib_write_bw 65536 B, 1024 QPs [MiB/s]  ≥ 0.9x 1 QP  1000 (800–2850)                                   0.80x (0.50x–0.95x)  1.12x short",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "cache line") {
		t.Errorf("a note on cache lines where no round measured them:\n%s", out)
	}
	if strings.Contains(out, "blocking ping-pong took") {
		t.Errorf("a note on TCP's wake-ups where its blocking ping-pong took 1.6x its spinning one:\n%s", out)
	}
	// Rounds that did not measure the floor (0, as where it cannot be)
	// print neither its row nor goroce's own part.
	for _, r := range rounds {
		r.FloorLat = 0
	}
	b.Reset()
	Print(&b, cfg, rounds)
	if out := b.String(); strings.Contains(out, "floor") || strings.Contains(out, "own part") {
		t.Errorf("a floor row without a floor measured:\n%s", out)
	}
	// A blocking TCP ping-pong that mostly waits for wake-ups is named as such.
	for _, r := range rounds {
		r.TCPLat *= 4
	}
	b.Reset()
	Print(&b, cfg, rounds)
	if out := b.String(); !strings.Contains(out, "(TCP's blocking ping-pong took 6.4x its spinning one: waking the other process costs most of it on this host") ||
		!strings.Contains(out, "0.25x (0.23x–0.38x)  met") {
		t.Errorf("no note on TCP's wake-ups, or the verdict changed:\n%s", out)
	}
	// Rounds whose cache line between the CPUs took twice the quickest
	// round trip and 100 ns more, or 300 ns or more, before or after, are
	// named. With some far apart
	// and two or more close, the table follows again for the close ones
	// alone (close: its heading); otherwise only the whole run's.
	for _, tc := range []struct {
		rts         [][2]float64
		want, close string
	}{
		{[][2]float64{{110, 120}, {115, 108}, {118, 119}}, " (a cache line went between the two CPUs and back in 108–120 ns around the rounds)\n", ""},
		{[][2]float64{{110, 540}, {115, 108}, {118, 119}}, "108–540 ns around the rounds; in round 1 it took 2x the quickest and 100 ns more, or 300 ns or more: the host had put the two vCPUs far apart",
			"the 2 rounds with the two vCPUs close (2, 3): medians (min–max)"},
		{[][2]float64{{108, 120}, {530, 550}, {0, 216}}, "108–550 ns around the rounds; in rounds 2, 3 it took 2x", ""},
		{[][2]float64{{0, 0}, {280, 0}, {0, 0}}, "280–280 ns around the rounds)\n", ""},
		{[][2]float64{{0, 0}, {377, 0}, {0, 542}}, "377–542 ns around the rounds; in rounds 2, 3 it took 2x the quickest and 100 ns more, or 300 ns or more", ""},
		// One quick reading: twice it, but not 100 ns more, is not far.
		{[][2]float64{{59, 106}, {118, 139}, {108, 114}}, " (a cache line went between the two CPUs and back in 59–139 ns around the rounds)\n", ""},
	} {
		for i, r := range rounds {
			r.LineRT = tc.rts[i]
		}
		b.Reset()
		Print(&b, cfg, rounds)
		out := b.String()
		if !strings.Contains(out, tc.want) {
			t.Errorf("round trips %v: no %q in\n%s", tc.rts, tc.want, out)
		}
		tables := 1
		if tc.close != "" {
			tables = 2
		}
		if n := strings.Count(out, " target "); n != tables {
			t.Errorf("round trips %v: %d tables, want %d:\n%s", tc.rts, n, tables, out)
		}
		if tc.close == "" {
			continue
		}
		_, second, _ := strings.Cut(out, tc.close)
		// Rounds 2 and 3: latency 9 and 6 µs against TCP's 40 and 16.
		if !strings.Contains(second, "ib_write_lat 2 B t_typical [usec]      ≤ 0.5x TCP   7.50 (6.00–9.00)         28.00 (16.00–40.00)      0.30x (0.23x–0.38x)  met") {
			t.Errorf("round trips %v: the close rounds' table is not theirs:\n%s", tc.rts, out)
		}
	}
}

func TestEndFigure(t *testing.T) {
	if v, err := endFigure("MiB/s 1234.500\n", "MiB/s"); err != nil || v != 1234.5 {
		t.Errorf("MiB/s: %v, %v", v, err)
	}
	if v, err := endFigure("port 1\nt_typical 7.250\n", "t_typical"); err != nil || v != 7.25 {
		t.Errorf("t_typical: %v, %v", v, err)
	}
	if _, err := endFigure("MiB/s 1\n", "t_typical"); !errors.Is(err, errNoFigure) {
		t.Errorf("a missing figure: %v, want errNoFigure", err)
	}
}

// TestEndArgs: an end given arguments it does not know says so and fails.
func TestEndArgs(t *testing.T) {
	for _, args := range [][]string{nil, {"tcp-sink"}, {"tcp-echo", "127.0.0.1", "0"}, {"tcp-ping", "127.0.0.2", "127.0.0.1:1", "2", "x"},
		{"tcp-source", "nowhere", "127.0.0.1:1", "2", "3"}, {"tcp-spin-sink", "127.0.0.1"}, {"tcp-spin-echo", "127.0.0.1"}, {"perftest", "ib_nothing_bw"}, {"udp-sink", "127.0.0.1"},
		{"udp-echo", "127.0.0.1"}, {"udp-echo", "127.0.0.1", "0"}, {"udp-echo", "nowhere", "5"}, {"udp-ping", "127.0.0.2", "127.0.0.1", "5"}, {"udp-ping", "127.0.0.2", "127.0.0.1:1"}} {
		var out, errb bytes.Buffer
		if code := End(args, &out, &errb); code == 0 || errb.Len() == 0 {
			t.Errorf("End(%q): exit %d, stderr %q; want a failure that says why", args, code, errb.String())
		}
	}
}

// TestEndEnv: goroce's ends run over the same-host path exactly when
// -samehost asks, whatever GOROCE_SAMEHOST this process has; TCP's ends
// never carry it.
func TestEndEnv(t *testing.T) {
	t.Setenv("GOROCE_SAMEHOST", "1")
	t.Setenv("GOROCE_BENCH_TEST", "kept")
	for _, tc := range []struct {
		sameHost bool
		want     []string // the two variables set here, in order
	}{{false, []string{"GOROCE_BENCH_TEST=kept"}}, {true, []string{"GOROCE_BENCH_TEST=kept", "GOROCE_SAMEHOST=1"}}} {
		var got []string
		for _, kv := range endEnv(tc.sameHost) {
			if strings.HasPrefix(kv, "GOROCE_BENCH_TEST=") || strings.HasPrefix(kv, "GOROCE_SAMEHOST=") {
				got = append(got, kv)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("sameHost %v: %q, want %q", tc.sameHost, got, tc.want)
		}
	}
}

// TestTargetsOrder runs Run on fake ends, shell commands that print
// what the real ones print, and checks what only the run's order shows:
// in the first round goroce's end of each pair that TCP is measured
// against starts first, in the second TCP's, the 64-byte run follows, and
// each QP count's run comes after its one-QP reference in the first
// round and before it in the second; and each figure an end prints lands
// in its round.
func TestTargetsOrder(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip(err)
	}
	var started []string
	fake := func(server bool, args ...string) *exec.Cmd {
		what := args[0]
		if what == "perftest" {
			what = args[1]
		}
		if server {
			what += " server"
		} else if i := slices.Index(args, "-q"); i >= 0 {
			what += " -q " + args[i+1]
		}
		started = append(started, what)
		var out string
		switch {
		case server && args[0] == "perftest":
			out = "Waiting for client\n"
		case server:
			out = "port 5001\n"
		case what == "ib_write_bw" && slices.Contains(args, "64"):
			out = " 64 1000 0.00 61.04 1.000000\n"
		case what == "ib_write_bw -q 1":
			out = " 65536 40960 0.00 1800.00 0.029000\n"
		case what == "ib_write_bw -q 16":
			out = " 65536 2560 0.00 1500.00 0.024000\n"
		case what == "ib_write_bw":
			out = " 65536 40960 0.00 2000.00 0.032000\n"
		case what == "ib_write_lat":
			out = " 2 20000 2.00 90.00 5.00 5.50 1.00 9.00 20.00\n"
		case what == "tcp-source":
			out = "MiB/s 1000\n"
		case what == "tcp-ping":
			out = "t_typical 10\n"
		case what == "tcp-spin-ping":
			out = "t_typical 4\n"
		case what == "udp-ping":
			out = "t_typical 3\n"
		default:
			t.Errorf("unexpected end %q", args)
		}
		return exec.Command(sh, "-c", "printf '"+out+"'")
	}
	probes := 0
	probe := func() time.Duration { probes++; return time.Duration(100*probes) * time.Nanosecond }
	rounds, err := Run(Config{Command: fake, Rounds: 2, QPs: []int{16}, LineProbe: probe}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	goroceFirst := []string{
		"ib_write_bw server", "ib_write_bw", "tcp-sink server", "tcp-source",
		"ib_write_lat server", "ib_write_lat", "tcp-echo server", "tcp-ping", "tcp-spin-echo server", "tcp-spin-ping", "udp-echo server", "udp-ping",
		"ib_write_bw server", "ib_write_bw", "ib_write_bw server", "ib_write_bw -q 1", "ib_write_bw server", "ib_write_bw -q 16",
	}
	tcpFirst := []string{
		"tcp-sink server", "tcp-source", "ib_write_bw server", "ib_write_bw",
		"tcp-echo server", "tcp-ping", "tcp-spin-echo server", "tcp-spin-ping", "udp-echo server", "udp-ping", "ib_write_lat server", "ib_write_lat",
		"ib_write_bw server", "ib_write_bw", "ib_write_bw server", "ib_write_bw -q 16", "ib_write_bw server", "ib_write_bw -q 1",
	}
	if want := append(slices.Clone(goroceFirst), tcpFirst...); !slices.Equal(started, want) {
		t.Errorf("ends started in the order\n%q, want\n%q", started, want)
	}
	for i, r := range rounds {
		wantRT := [2]float64{float64(200*i + 100), float64(200*i + 200)} // before and after each round
		if r.BW != 2000 || r.TCPBW != 1000 || r.Lat != 5 || r.TCPLat != 10 || r.TCPSpinLat != 4 || r.FloorLat != 3 || r.Rate != 1 || !slices.Equal(r.QPBW, []float64{1500}) || !slices.Equal(r.QPRef, []float64{1800}) || r.LineRT != wantRT {
			t.Errorf("round %d: %+v", i+1, *r)
		}
	}
}
