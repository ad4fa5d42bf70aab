package main

import "testing"

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
	if len(seen) != 26 {
		t.Errorf("%d cells, want 26", len(seen))
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
