package perftest

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/verbs"
)

// The client's record in testdata/pcaps/rc_write_64.pcap and the address
// line perftest printed for it (rc_write_64.client.txt).
const (
	goldenRecord = "0000:0001:000014:5a14bc:00000503:00005620a293f000:00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:02:00000000:\x00"
	goldenLine   = " local address: LID 0000 QPN 0x0014 PSN 0x5a14bc RKey 0x000503 VAddr 0x005620a293f000\n GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:02\n"
)

func TestDestGolden(t *testing.T) {
	d, err := ParseDest([]byte(goldenRecord))
	if err != nil {
		t.Fatal(err)
	}
	want := Dest{OutReads: 1, QPN: 0x14, PSN: 0x5a14bc, RKey: 0x503, VAddr: 0x5620a293f000,
		GID: verbs.GIDFromAddr(netip.MustParseAddr("::ffff:198.18.0.2"))}
	if d != want {
		t.Fatalf("parsed %+v, want %+v", d, want)
	}
	if got := d.Marshal(); string(got) != goldenRecord {
		t.Errorf("marshal %q, want %q", got, goldenRecord)
	}
	var b bytes.Buffer
	p := defaults(Test{Write, BW})
	p.address(&b, "local", d)
	if b.String() != goldenLine {
		t.Errorf("address lines\n%q, want\n%q", b.String(), goldenLine)
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, m := range []string{
		"", goldenRecord[:107], strings.Replace(goldenRecord, "5a14bc", "5a14bg", 1),
		strings.Replace(goldenRecord, "0000:0001", "00000001", 1), strings.Replace(goldenRecord, ":00000000:", ":0000000:0", 1),
	} {
		if _, err := ParseDest([]byte(m)); err == nil {
			t.Errorf("ParseDest(%q) accepted", m)
		}
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte(goldenRecord))
	f.Fuzz(func(t *testing.T, m []byte) {
		d, err := ParseDest(m)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to a record that parses the same.
		if d2, err := ParseDest(d.Marshal()); err != nil || d2 != d {
			t.Fatalf("%q: round trip %+v, %v", m, d2, err)
		}
	})
}

func TestAltHex(t *testing.T) {
	for _, tc := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x14, 6, "0x0014"}, {0x80, 4, "0x80"}, {0x5a14bc, 6, "0x5a14bc"}, {0xec3e5355, 8, "0xec3e5355"}, {0, 16, "0000000000000000"}} {
		if got := altHex(tc.v, tc.width); got != tc.want {
			t.Errorf("altHex(%#x, %d) = %q, want %q", tc.v, tc.width, got, tc.want)
		}
	}
}

func TestParseDefaults(t *testing.T) {
	for _, tc := range []struct {
		tool                     string
		args                     []string
		size, iters, tx, rx, cqm int
	}{
		{"ib_write_bw", nil, 65536, 5000, 128, 1, 1}, // large messages signal every WR
		{"ib_write_bw", []string{"-s", "64"}, 64, 5000, 128, 1, 100},
		{"ib_read_bw", []string{"-n", "5", "-s", "64"}, 64, 5, 5, 1, 5}, // as in rc_read_64.client.txt
		{"ib_send_bw", []string{"-n", "5", "-s", "64"}, 64, 5, 5, 6, 5}, // RX depth 6, as rc_send_64.server.txt
		{"ib_send_lat", nil, 2, 1000, 1, 512, 1},
		{"ib_atomic_bw", nil, 8, 1000, 128, 1, 100},
		{"ib_write_bw", []string{"-a"}, 8 << 20, 5000, 128, 1, 100},
	} {
		p, err := Parse(Tools[tc.tool], tc.args)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.tool, tc.args, err)
		}
		if p.Size != tc.size || p.Iters != tc.iters || p.TxDepth != tc.tx || p.RxDepth != tc.rx || p.CQMod != tc.cqm {
			t.Errorf("%s %q: size %d iters %d tx %d rx %d cq-mod %d, want %d %d %d %d %d", tc.tool, tc.args,
				p.Size, p.Iters, p.TxDepth, p.RxDepth, p.CQMod, tc.size, tc.iters, tc.tx, tc.rx, tc.cqm)
		}
	}
	p, err := Parse(Tools["ib_write_bw"], []string{"--size=4096", "-D3", "--report_gbits", "host"})
	if err != nil || p.Duration != 3 || p.Margin != 0 || !p.NoPeak || !p.Gbits || p.Server != "host" || p.Size != 4096 {
		t.Errorf("long options: %+v, %v", p, err)
	}
}

// TestBusySpin: the latency tests busy-poll their waits, as perftest's poll
// their CQs, unless -e asks for events. In the bandwidth tools (Main sets
// PollBW) every wait polls, on either side, unless -b or -e; run by goroce
// bench without -poll (no PollBW) every bandwidth wait blocks.
func TestBusySpin(t *testing.T) {
	for _, tc := range []struct {
		tool   string
		args   []string
		pollBW bool // Params.PollBW
		busy   bool // whether the waits busy-poll
	}{
		{"ib_write_lat", nil, false, true},
		{"ib_send_lat", nil, false, true},
		{"ib_read_lat", nil, false, true},
		{"ib_atomic_lat", nil, false, true},
		{"ib_write_lat", []string{"-e"}, false, false},
		{"ib_send_lat", []string{"-e"}, false, false},
		{"ib_write_bw", nil, false, false},
		{"ib_send_bw", nil, false, false},
		{"ib_write_bw", nil, true, true},
		{"ib_send_bw", nil, true, true},
		{"ib_read_bw", nil, true, true},
		{"ib_atomic_bw", nil, true, true},
		{"ib_send_bw", []string{"-b"}, true, false},
		{"ib_write_bw", []string{"-e"}, true, false},
		{"ib_send_bw", []string{"-e", "-b"}, true, false},
	} {
		p, err := Parse(Tools[tc.tool], tc.args)
		if err != nil {
			t.Fatalf("%s %q: %v", tc.tool, tc.args, err)
		}
		p.PollBW = tc.pollBW
		if got := p.busySpin() > 0; got != tc.busy {
			t.Errorf("%s %q, PollBW %v: busy-polls %v, want %v", tc.tool, tc.args, tc.pollBW, got, tc.busy)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args []string
		want string
	}{
		{"ib_write_bw", []string{"-R"}, "does not support -R: goroce has no rdma_cm"},
		{"ib_write_bw", []string{"--use-srq"}, "does not support --use-srq"},
		{"ib_write_bw", []string{"-c", "XRC"}, "does not support -c XRC"},
		{"ib_write_bw", []string{"-c", "FOO"}, "want RC, UC or UD"},
		{"ib_read_bw", []string{"-c", "UC"}, "needs RC"},
		{"ib_atomic_bw", []string{"-s", "16"}, "cannot be changed for atomic"},
		{"ib_write_lat", []string{"-q", "2"}, "latency tests use one QP"},
		{"ib_write_bw", []string{"-n", "3"}, "want an integer in 5.."},
		{"ib_write_bw", []string{"-m", "1000"}, "want 256, 512, 1024, 2048 or 4096"},
		{"ib_write_bw", []string{"-D", "2", "-a"}, "duration mode does not support"},
		{"ib_write_bw", []string{"-D", "4", "-f", "2"}, "longer than twice the margin"},
		{"ib_write_bw", []string{"-n", "10", "-l", "3"}, "multiple of the post list"},
		{"ib_write_bw", []string{"--bogus"}, "unrecognized option '--bogus'"},
		{"ib_write_bw", []string{"a", "b"}, "more than one server"},
		{"ib_write_bw", []string{"--rate_limit=1", "--rate_limit_type=HW"}, "software rate limiter (SW) only"},
		{"ib_write_bw", []string{"--burst_size=4"}, "burst mode needs --rate_limit"},
		{"ib_write_lat", []string{"--rate_limit=1"}, "runs BW tests only"},
		{"ib_write_bw", []string{"--rate_limit=1", "--rate_units=x"}, "use M, g or p"},
	} {
		_, err := Parse(Tools[tc.tool], tc.args)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want a usage error with %q", tc.tool, tc.args, err, tc.want)
		}
	}
	if _, err := Parse(Tools["ib_send_bw"], []string{"-h"}); err != ErrHelp {
		t.Errorf("-h: %v", err)
	}
}

// TestLatencyMaths checks perftest's rules on a hand-made series: deltas
// of consecutive posts, the two largest dropped, the median as t_typical,
// half the round trip for write, the truncated stdev terms.
func TestLatencyMaths(t *testing.T) {
	// Deltas (ns): 10 µs × 5, 20 µs, 30 µs, then 1000 and 2000 µs (dropped).
	deltas := []int64{10000, 10000, 10000, 10000, 10000, 20000, 30000, 1000000, 2000000}
	posted := []int64{0}
	for _, d := range deltas {
		posted = append(posted, posted[len(posted)-1]+d)
	}
	p := defaults(Test{Read, Lat}) // read: the full round trip
	s := p.latency(nil, posted, 2)
	if s.Min != 10 || s.Typical != 10 || s.Max != 1000 || math.Abs(s.Avg-100.0/7) > 1e-9 || s.P99 != 1000 || s.Iters != 10 {
		t.Errorf("read: %+v", s)
	}
	// Stdev: avg 14.29; terms int(4.29)=4 ×5, int(-5.71)=-5, int(-15.71)=-15.
	if want := math.Sqrt((5*16 + 25 + 225) / 7.0); math.Abs(s.Stdev-want) > 1e-9 {
		t.Errorf("stdev %v, want %v", s.Stdev, want)
	}
	p = defaults(Test{Write, Lat}) // write: half of it
	if s := p.latency(nil, posted, 2); s.Min != 5 || s.Typical != 5 {
		t.Errorf("write: %+v", s)
	}
}

// TestBWMaths checks the bandwidth figures on a steady series: 1000
// messages of 1 MiB, one per millisecond, each completed 1 ms after it was
// posted.
func TestBWMaths(t *testing.T) {
	n := 1000
	tm := &bwTimes{size: 1 << 20, iters: n, cqMod: 1, postList: 1, posted: make([]int64, n), completed: make([]int64, n)}
	for i := range n {
		tm.posted[i], tm.completed[i] = int64(i)*1e6, int64(i+1)*1e6
	}
	p := defaults(Test{Write, BW})
	r := p.report(tm)
	if math.Abs(r.BWAvg-1000) > 1e-6 || math.Abs(r.MsgRate-0.001) > 1e-9 || math.Abs(r.BWPeak-1000) > 1e-6 {
		t.Errorf("MiB/s: %+v", r)
	}
	p.Gbits = true
	if r := p.report(tm); math.Abs(r.BWAvg-8.388608) > 1e-6 {
		t.Errorf("Gb/s: %+v", r)
	}
	var b bytes.Buffer
	p.Gbits = false
	p.bwRow(&b, BWReport{Size: 64, Iters: 5, BWPeak: 0.05, BWAvg: 0.04, MsgRate: 0.000712}, nil)
	// The numbers of rc_write_64.client.txt, in perftest 6's row format.
	if want := " 64         5                0.05               0.04   \t\t     0.000712\n"; b.String() != want {
		t.Errorf("row %q, want %q", b.String(), want)
	}
}

// TestJSONReport: --out_json_file gets perftest's keys, as valid JSON.
func TestJSONReport(t *testing.T) {
	file := t.TempDir() + "/out.json"
	p, err := Parse(Tools["ib_write_bw"], []string{"--out_json_file", file, "-s", "4096"})
	if err != nil {
		t.Fatal(err)
	}
	p.devName, p.mtuBytes, p.gidIndex = "goroce_127.0.0.1", 4096, 1
	p.bwRow(io.Discard, BWReport{Size: 4096, Iters: 5000, BWPeak: 901.5, BWAvg: 850.25, MsgRate: 0.217664}, nil)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		TestInfo map[string]any `json:"test_info"`
		Results  map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	if got.TestInfo["test"] != "RDMA_Write_BW_Test" || got.TestInfo["Device"] != "goroce_127.0.0.1" ||
		got.Results["BW_average"] != 850.25 || got.Results["MsgSize"] != 4096.0 || got.Results["n_iterations"] != 5000.0 {
		t.Errorf("JSON report:\n%s", b)
	}
}

// TestPeakDelta compares the hull search with perftest's every-pair loop
// on random bursty timelines.
func TestPeakDelta(t *testing.T) {
	brute := func(p, c []int64, n, cqMod, postList int) int64 {
		opt := int64(math.MaxInt64)
		for i := 0; i < n; i += postList {
			j := (i+1+cqMod-1)/cqMod*cqMod - 1
			for ; j < n; j += cqMod {
				opt = min(opt, (c[j]-p[i])/int64(j-i+1))
			}
			if n%cqMod != 0 {
				opt = min(opt, (c[n-1]-p[i])/int64(n-i))
			}
		}
		return opt
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(300)
		cqMod, postList := 1+rng.IntN(8), 1+rng.IntN(4)
		p, c := make([]int64, n), make([]int64, n)
		var now int64
		for i := range n {
			now += rng.Int64N(1000) * int64(rng.IntN(3)) // bursts of equal stamps
			p[i] = now
		}
		done := int64(0)
		for j := range n {
			done = max(done, p[j]) + rng.Int64N(5000)
			c[j] = done
		}
		if got, want := peakDelta(p, c, n, cqMod, postList), brute(p, c, n, cqMod, postList); got != want {
			t.Fatalf("trial %d (n %d, cq-mod %d, post list %d): %d, want %d", trial, n, cqMod, postList, got, want)
		}
	}
}

// TestOneP: every tool runs on one P unless the user set GOMAXPROCS; a
// bandwidth tool may poll (PollBW), a latency tool polls anyway.
func TestOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	tool := func(name string) *Params {
		p, err := Parse(Tools[name], nil)
		if err != nil {
			t.Fatal(err)
		}
		p.asTool()
		return p
	}
	runtime.GOMAXPROCS(3)
	t.Setenv("GOMAXPROCS", "3")
	if p := tool("ib_write_bw"); !p.PollBW {
		t.Error("ib_write_bw as a tool: PollBW unset")
	}
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Errorf("GOMAXPROCS=3 set: ib_write_bw left %d Ps, want 3", got)
	}
	os.Unsetenv("GOMAXPROCS") // t.Setenv restores it
	if p := tool("ib_write_lat"); p.PollBW {
		t.Error("ib_write_lat as a tool: PollBW set")
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS unset: ib_write_lat left %d Ps, want 1", got)
	}
	runtime.GOMAXPROCS(3)
	tool("ib_send_bw")
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS unset: ib_send_bw left %d Ps, want 1", got)
	}
}

// TestBufferSize: a QP's halves are the message size (at least a cycle
// buffer) and a cache line, and a buffer beyond the machine's memory is a
// clear error instead of the Go runtime's fatal "out of memory" (which
// ib_write_bw -s 1073741824 -q 1024 met on a 24 GiB machine).
func TestBufferSize(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		size, qps   int
		mem         uint64
		half, total int
		err         bool
	}{
		{65536, 1, 24 * gib, 65600, 2 * 65600, false},
		{65536, 256, 24 * gib, 65600, 2 * 65600 * 256, false},
		{2, 4, 24 * gib, 4160, 2 * 4160 * 4, false}, // a cycle buffer at least
		{1 << 30, 1024, 24 * gib, 0, 0, true},
		{1 << 31, 1 << 16, 0, (1 << 31) + 64, 2 * ((1 << 31) + 64) * (1 << 16), false}, // memory unknown: as asked
		{1 << 20, 12 * 1024, 24 * gib, 0, 0, true},                                     // 24 GiB and a little: over
	} {
		p := &Params{Size: tc.size, QPs: tc.qps}
		half, total, err := bufferSize(p, tc.mem)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "work buffer") {
				t.Errorf("-s %d -q %d, %d bytes of memory: err %v, want the work buffer's error", tc.size, tc.qps, tc.mem, err)
			}
			continue
		}
		if err != nil || half != tc.half || total != tc.total {
			t.Errorf("-s %d -q %d: %d, %d, %v; want %d, %d", tc.size, tc.qps, half, total, err, tc.half, tc.total)
		}
	}
}

// TestCPUProfile: GOROCE_CPUPROFILE's profile is a pprof file (gzipped
// protocol buffer) once the tool's run ends; a path that cannot be created
// is an error, not a run without it.
func TestCPUProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	stop, err := startCPUProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	stop()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile of %d bytes does not start as gzip: % x", len(b), b[:min(len(b), 4)])
	}
	if _, err := startCPUProfile(filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.prof")); err == nil {
		t.Fatal("a profile in a missing directory started")
	}
}

// TestQPSet: the bandwidth client's set of QPs with room yields its
// members in index order across words, and a loop may remove the member
// it is given without losing the rest.
func TestQPSet(t *testing.T) {
	s := newQPSet(130)
	var got []int
	for i := range s.members() {
		got = append(got, i)
		if i%3 != 0 {
			s.remove(i)
		}
	}
	if len(got) != 130 || got[0] != 0 || got[129] != 129 || !slices.IsSorted(got) {
		t.Fatalf("first pass yielded %d QPs: %v", len(got), got)
	}
	s.add(64)
	got = slices.Collect(s.members())
	want := []int{0}
	for i := 3; i < 130; i += 3 {
		if i > 64 && want[len(want)-1] < 64 {
			want = append(want, 64)
		}
		want = append(want, i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("second pass %v, want %v", got, want)
	}
}
