package sweep

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

const sweepTables = ` Bandwidth against message size (1 QP), goroce ib_write_bw vs one TCP stream, same run
 #bytes     #iters        goroce[MiB/s]       TCP[MiB/s]      ratio
 2          20000                  1.59             0.45      3.57x
 4096       20000               1183.31           941.54      1.26x

 Latency against message size, goroce ib_write_lat vs TCP ping-pong (t_typical, one way), same run
 #bytes     #iters         goroce[usec]        TCP[usec]      ratio
 2          1000                  12.01             5.52      2.18x
 1048576    1000                 507.14           222.45      2.28x

 Aggregate bandwidth against QP count (65536-byte messages), goroce vs as many TCP streams, same run
 #QPs       #iters/QP     goroce[MiB/s]       TCP[MiB/s]      ratio
 1          4096                2260.05          2321.68      0.97x
 1024       5                   1107.01          2256.91      0.49x
`

// TestParseSweep reads the tables Run prints back into its result.
func TestParseSweep(t *testing.T) {
	r, err := Parse(strings.NewReader(sweepTables))
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		BWBySize:  []Point{{2, 1.59, 0.45}, {4096, 1183.31, 941.54}},
		LatBySize: []Point{{2, 12.01, 5.52}, {1048576, 507.14, 222.45}},
		BWByQPs:   []Point{{1, 2260.05, 2321.68}, {1024, 1107.01, 2256.91}},
	}
	for _, c := range []struct {
		name      string
		got, want []Point
	}{{"BWBySize", r.BWBySize, want.BWBySize}, {"LatBySize", r.LatBySize, want.LatBySize}, {"BWByQPs", r.BWByQPs, want.BWByQPs}} {
		if len(c.got) != len(c.want) {
			t.Fatalf("%s: %v, want %v", c.name, c.got, c.want)
		}
		for i := range c.got {
			if c.got[i] != c.want[i] {
				t.Errorf("%s[%d] = %v, want %v", c.name, i, c.got[i], c.want[i])
			}
		}
	}
	if r.SameHost || r.Network != "loopback" || r.Rounds != 1 {
		t.Errorf("a sweep without headers parsed as same-host %v, network %q, %d rounds (want false, loopback, 1)", r.SameHost, r.Network, r.Rounds)
	}
	r, err = Parse(strings.NewReader(" " + networkHeader + "loopback\n " + roundsHeader + "3 per point, goroce then TCP each time; medians\n" + sweepTables))
	if err != nil || r.Rounds != 3 || len(r.BWByQPs) != 2 {
		t.Errorf("sweep of 3 rounds: %+v, %v", r, err)
	}
	const veth = "veth between two namespaces, MTU 9000"
	r, err = Parse(strings.NewReader(" " + networkHeader + veth + "\n" + sweepTables))
	if err != nil || r.Network != veth || len(r.BWBySize) == 0 {
		t.Errorf("sweep over a veth: %+v, %v", r, err)
	}
	withLines := strings.ReplaceAll(sweepTables, "\n Latency", "\n "+lineHeader+"118 ns before the latency points\n Latency")
	r, err = Parse(strings.NewReader(" " + lineHeader + "540 ns before the bandwidth points\n" + withLines))
	if err != nil || len(r.LatBySize) != 2 {
		t.Errorf("sweep with cache-line round trips: %+v, %v", r, err)
	}
	r, err = Parse(strings.NewReader(" " + sameHostHeader + "\n\n" + sweepTables + "\n plot: sweep.svg\n"))
	if err != nil || !r.SameHost || len(r.BWByQPs) != 2 {
		t.Errorf("same-host sweep: %+v, %v", r, err)
	}
	for _, bad := range []string{"", "no tables here\n", " 2 20000 1.59 0.45 3.57x\n", " " + roundsHeader + "\n" + sweepTables,
		" " + roundsHeader + "0 per point\n" + sweepTables,
		" Latency against message size\n 2 1000 x 5.52 2.18x\n"} {
		if _, err := Parse(strings.NewReader(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// TestPlotLogAxis: the latency panel's log axis is labelled at 1, 2 and 5
// times the powers of ten, never with the long decimals of intermediate
// logarithms.
func TestPlotLogAxis(t *testing.T) {
	r, err := Parse(strings.NewReader(sweepTables))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WritePlot(&b, r, "test"); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, label := range []string{">1<", ">2<", ">5<", ">10<", ">20<", ">50<", ">100<", ">200<", ">500<", ">1000<"} {
		if !strings.Contains(svg, label) {
			t.Errorf("log axis label %s missing", label)
		}
	}
	if strings.Contains(svg, ">3.16") || strings.Contains(svg, ">5.6") {
		t.Error("log axis labelled at an intermediate logarithm")
	}
	if !strings.HasPrefix(svg, "<svg") && !strings.HasPrefix(svg, "<?xml") {
		t.Errorf("not an SVG document: %.40q", svg)
	}
}

// FuzzParseSweep reads arbitrary tables back and plots what it accepts:
// a table it takes must draw a picture with only finite coordinates.
func FuzzParseSweep(f *testing.F) {
	f.Add(sweepTables)
	f.Add(" Latency against message size\n 2 1 NaN 5 1x\n")
	f.Add(" Bandwidth against message size\n 0 1 5 5 1x\n")
	f.Add(" Bandwidth against message size\n 4 1 1e308 5 1x\n 8 1 -3 5 1x\n")
	f.Add(" Latency against message size\n 2 1 0 0 0x\n 4 1 0 0 0x\n") // every run failed: once an endless y axis
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := WritePlot(&b, r, "fuzz"); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"NaN", "Inf"} {
			if strings.Contains(b.String(), bad) {
				t.Fatalf("plot of %q has %s in it", in, bad)
			}
		}
	})
}

// TestSweepSection: a section measures its points in rounds, each round
// over all of them, every other round backwards; a point's row has the
// medians of goroce's figures, of TCP's and of the rounds' ratios (which
// need not be the ratio of the medians), and the cache line's round trip
// is printed as it was before the first round and after each. An error
// ends the section.
func TestSweepSection(t *testing.T) {
	probe := time.Duration(100)
	cfg := Config{Rounds: 3, LineProbe: func() time.Duration { probe += 10; return probe }}
	figures := map[int][][2]float64{ // per point, its rounds' figures
		2: {{300, 100}, {100, 100}, {200, 50}}, // ratios 3, 1, 4
		4: {{10, 1}, {20, 1}, {30, 1}},
	}
	var order []int
	point := func(x int) sweepPoint {
		return sweepPoint{x, 7, func() (float64, float64, error) {
			f := figures[x][len(order)/2]
			order = append(order, x)
			return f[0], f[1], nil
		}}
	}
	var out strings.Builder
	var series []Point
	if err := cfg.section(&out, "the test points", &series, []sweepPoint{point(2), point(4)}, "Bandwidth against message size (test)", "#x", "#it", "g", "t"); err != nil {
		t.Fatal(err)
	}
	if want := []int{2, 4, 4, 2, 2, 4}; !slices.Equal(order, want) {
		t.Errorf("points measured in the order %v, want %v", order, want)
	}
	if want := []Point{{2, 200, 100}, {4, 20, 1}}; !slices.Equal(series, want) {
		t.Errorf("series %v, want %v", series, want)
	}
	want := " " + lineHeader + "110 ns before the test points, 120, 130, 140 ns after each round\n" +
		" Bandwidth against message size (test)\n" +
		" #x         #it                       g                t      ratio\n" +
		" 2          7                    200.00           100.00      3.00x\n" +
		" 4          7                     20.00             1.00     20.00x\n"
	if out.String() != want {
		t.Errorf("section printed\n%s\nwant\n%s", out.String(), want)
	}
	if r, err := Parse(strings.NewReader(out.String())); err != nil || len(r.BWBySize) != 2 {
		t.Errorf("Parse of the section: %v, %v", r, err)
	}

	boom := errors.New("boom")
	calls := 0
	failing := sweepPoint{8, 1, func() (float64, float64, error) { calls++; return 0, 0, boom }}
	out.Reset()
	if err := cfg.section(&out, "the test points", &series, []sweepPoint{failing, point(2)}, "A header", "#x", "#it", "g", "t"); !errors.Is(err, boom) || calls != 1 || out.Len() != 0 {
		t.Errorf("section with a failing point: %v after %d calls, printed %q; want boom after 1, nothing", err, calls, out.String())
	}
}
