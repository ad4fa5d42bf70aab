package main

import (
	"maps"
	"strings"
	"testing"
)

// The parsers and plausibility checks run without root or QEMU; the
// harness itself runs with make interop (docs/INTEROP.md).

const bwOut = ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 64         5                0.05               0.04   		   0.000712
---------------------------------------------------------------------------------------
`

const latOut = ` #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] 
 2       200          1021.50        4410.02      1500.11       1600.33        300.10        4000.00      4410.02   
`

const ppOut = `  local address:  LID 0x0000, QPN 0x000025, PSN 0x426f46, GID ::ffff:198.18.0.2
640 bytes in 0.02 seconds = 0.28 Mbit/sec
5 iters in 0.02 seconds = 3624.60 usec/iter
`

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		c    cell
		out  string
		need bool
		bad  bool
	}{
		{cell{kind: "bw", size: 64, iters: 5}, bwOut, true, false},
		{cell{kind: "bw", size: 64, iters: 200}, bwOut, true, true},
		{cell{kind: "bw", size: 2, iters: 5}, bwOut, true, true},
		{cell{kind: "bw", size: 2, iters: 5}, "nothing", true, true},
		{cell{kind: "lat", size: 2, iters: 200}, "nothing", false, false},
		{cell{kind: "lat", size: 2, iters: 200}, latOut, true, false},
		{cell{kind: "pp", size: 64, iters: 5}, ppOut, true, false},
		{cell{kind: "pp", size: 4096, iters: 5}, ppOut, true, true},
	} {
		_, why := check(tc.c, tc.out, tc.need)
		if (why != "") != tc.bad {
			t.Errorf("check(%+v) = %q, want bad=%v", tc.c, why, tc.bad)
		}
	}
}

func TestMatrix(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range matrix() {
		if seen[c.name()] {
			t.Errorf("duplicate cell %s", c.name())
		}
		seen[c.name()] = true
	}
	if len(seen) != 38 {
		t.Errorf("%d cells, want 38", len(seen))
	}
	for _, name := range []string{"rc_pingpong -s 1048576 -n 5 loss=0.1%", "rc_pingpong -s 4194304 -n 1 loss=5%", "ib_write_bw -s 65536 -n 50 -q 8 loss=1%"} {
		if !seen[name] {
			t.Errorf("no cell %q", name)
		}
	}
}

// TestClockWarning: a failure whose guest perftest could not estimate its
// CPU clock says so; output without the warning adds nothing.
func TestClockWarning(t *testing.T) {
	out := "Correlation coefficient r^2: 0.703747 < 0.9\n----\n" + bwOut
	if got, want := clockWarning(out), "the guest's perftest could not estimate its CPU clock (Correlation coefficient r^2: 0.703747 < 0.9), which zeroes its rates"; got != want {
		t.Errorf("clockWarning = %q, want %q", got, want)
	}
	if got := clockWarning(bwOut); got != "" {
		t.Errorf("clockWarning without the warning = %q, want nothing", got)
	}
}

// nftList is what `nft list table bridge interop_loss` prints after a run.
const nftList = `table bridge interop_loss {
	chain in {
		type filter hook input priority filter; policy accept;
		udp dport 4791 counter packets 5230 bytes 5480216 comment "in_all"
		udp dport 4791 numgen random mod 1000 < 20 counter packets 101 bytes 105848 drop comment "in_drop"
		udp dport 4791 numgen random mod 1000 < 2 counter packets 9 bytes 9432 @th,160,8 set 0x55 udp checksum set 0 comment "in_corrupt"
	}

	chain out {
		type filter hook output priority filter; policy accept;
		udp dport 4791 counter packets 5301 bytes 5555448 comment "out_all"
		udp dport 4791 numgen random mod 1000 < 20 counter packets 0 bytes 0 drop comment "out_drop"
		udp dport 4791 numgen random mod 1000 < 2 counter packets 12 bytes 12576 @th,160,8 set 0x55 comment "out_corrupt"
	}
}
`

func TestParseNftCounters(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want nftCounts
	}{
		{nftList, nftCounts{"in_all": 5230, "in_drop": 101, "in_corrupt": 9, "out_all": 5301, "out_drop": 0, "out_corrupt": 12}},
		{"table bridge interop_loss {\n}\n", nftCounts{}},
		{"", nftCounts{}},
	} {
		if got := parseNftCounters(tc.out); !maps.Equal(got, tc.want) {
			t.Errorf("parseNftCounters(%.40q) = %v, want %v", tc.out, got, tc.want)
		}
	}
}

// TestLossRules: the rules parse back into the counters lossCheck reads.
func TestLossRules(t *testing.T) {
	c := parseNftCounters(strings.ReplaceAll(lossRules(50), "counter", "counter packets 0 bytes 0"))
	if len(c) != 6 {
		t.Errorf("lossRules(50) has counters %v, want 6", c)
	}
	if r := lossRules(50); !strings.Contains(r, "mod 1000 < 50 counter drop") || !strings.Contains(r, "mod 1000 < 2 counter @th") {
		t.Errorf("lossRules(50) =\n%s", r)
	}
}

func TestLossCheck(t *testing.T) {
	ok := nftCounts{"in_all": 5230, "in_drop": 101, "in_corrupt": 9, "out_all": 5301, "out_drop": 99, "out_corrupt": 12}
	// with returns ok with the counters named in kv (name, value, ...) set.
	with := func(kv ...any) nftCounts {
		c := maps.Clone(ok)
		for i := 0; i < len(kv); i += 2 {
			c[kv[i].(string)] = uint64(kv[i+1].(int))
		}
		return c
	}
	for _, tc := range []struct {
		n               nftCounts
		toGuest, toHost flow
		bad             int
	}{
		{ok, flow{5301, 0}, flow{5120, 9}, 0},
		{ok, flow{5290, 0}, flow{5100, 0}, 0},                 // the capture missed some; no corrupted byte changed
		{with("in_drop", 0), flow{5301, 0}, flow{5120, 9}, 0}, // one way dropped nothing
		{with("out_drop", 0), flow{5301, 0}, flow{5120, 9}, 0},
		{with("in_drop", 0, "out_drop", 0), flow{5301, 0}, flow{5120, 9}, 1}, // nothing dropped
		{with("in_corrupt", 0, "out_corrupt", 0), flow{5301, 0}, flow{5120, 0}, 1},
		{ok, flow{5301, 1}, flow{5120, 9}, 1},                  // a bad ICRC before nft
		{ok, flow{5301, 0}, flow{5120, 10}, 1},                 // more bad ICRCs than nft made
		{with("out_all", 90), flow{5301, 0}, flow{5120, 9}, 1}, // nft counted GSO bursts
	} {
		if got := lossCheck(tc.n, tc.toGuest, tc.toHost); len(got) != tc.bad {
			t.Errorf("lossCheck(%v, %v, %v) = %q, want %d complaints", tc.n, tc.toGuest, tc.toHost, got, tc.bad)
		}
	}
}

const icrcOut = `x.pcap                                   roce_packets=10421 icrc_ok=10412 icrc_bad=9
FLOW 198.18.0.1 -> 198.18.0.2 roce_packets=5301 icrc_ok=5301 icrc_bad=0
FLOW 198.18.0.2 -> 198.18.0.1 roce_packets=5120 icrc_ok=5111 icrc_bad=9
TOTAL roce_packets=10421 icrc_ok=10412 icrc_bad=9
`

func TestParseICRC(t *testing.T) {
	total, flows, ok := parseICRC(icrcOut)
	if !ok || total != (flow{10421, 9}) || len(flows) != 2 ||
		flows["198.18.0.1->198.18.0.2"] != (flow{5301, 0}) || flows["198.18.0.2->198.18.0.1"] != (flow{5120, 9}) {
		t.Errorf("parseICRC = %v %v %v", total, flows, ok)
	}
	if _, _, ok := parseICRC("Traceback (most recent call last):\n"); ok {
		t.Errorf("parseICRC of no TOTAL line: ok")
	}
	total, flows, ok = parseICRC("TOTAL roce_packets=0 icrc_ok=0 icrc_bad=0\n")
	if !ok || total != (flow{}) || len(flows) != 0 {
		t.Errorf("parseICRC of an empty capture = %v %v %v", total, flows, ok)
	}
}

func TestParseCounters(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want map[string]uint64
	}{
		{ppOut + "counters: early_go_backs=3 icrc_errors=2 rcvd_seq_err=14\n", map[string]uint64{"early_go_backs": 3, "icrc_errors": 2, "rcvd_seq_err": 14}},
		{"counters:\n", map[string]uint64{}},
		{ppOut, nil},
		{"the counters: are not here\n", nil},
	} {
		if got := parseCounters(tc.out); !maps.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("parseCounters(%q) = %v, want %v", tc.out, got, tc.want)
		}
	}
	hw := parseHWCounters("ack_deferred:0\ncompleter_retry_err:12\nrcvd_seq_err:3\nbogus\nx:y\n")
	if want := map[string]uint64{"ack_deferred": 0, "completer_retry_err": 12, "rcvd_seq_err": 3}; !maps.Equal(hw, want) {
		t.Errorf("parseHWCounters = %v, want %v", hw, want)
	}
	if got, want := recoveryNote("rxe", hw), "rxe completer_retry_err=12 rcvd_seq_err=3"; got != want {
		t.Errorf("recoveryNote = %q, want %q", got, want)
	}
	if got := recoveryNote("rxe", map[string]uint64{"ack_deferred": 5}); got != "" {
		t.Errorf("recoveryNote of no recovery = %q, want nothing", got)
	}
}
