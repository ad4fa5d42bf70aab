package bench

import (
	"strings"
	"testing"
)

// TestPrintSummary: medians and ranges of each figure and of each round's
// own ratio (not the ratio of the medians), rows for what was measured.
func TestPrintSummary(t *testing.T) {
	rounds := []*Result{
		{Size: 65536, BW: 3000, TCPBW: 2000, Lat: 8, TCPLat: 8, CPUPerGB: 0.6, TCPCPUPerGB: 0.8, UDPBW: 6000},
		{Size: 65536, BW: 2000, TCPBW: 2000, Lat: 10, TCPLat: 5, CPUPerGB: 0.8, TCPCPUPerGB: 0.8, UDPBW: 4000},
		{Size: 65536, BW: 2500, TCPBW: 1000, Lat: 9, TCPLat: 9, CPUPerGB: 0.7, TCPCPUPerGB: 0.7, UDPBW: 5000},
		{Size: 65536, BW: 1000, TCPBW: 500, Lat: 12, TCPLat: 6, CPUPerGB: 0.9, TCPCPUPerGB: 0.6, UDPBW: 2000},
	}
	var b strings.Builder
	PrintSummary(&b, rounds)
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{
		"4 rounds: medians (min–max)",
		// BW 1000, 2000, 2500, 3000; TCP 500, 1000, 2000, 2000; ratios 1, 1.5, 2, 2.5
		"2250.00 (1000.00–3000.00)", "1500.00 (500.00–2000.00)", "1.75x (1.00x–2.50x)",
		// latency 8, 9, 10, 12; TCP 5, 6, 8, 9; ratios 1, 1, 2, 2
		"9.50 (8.00–12.00)", "7.00 (5.00–9.00)", "1.50x (1.00x–2.00x)",
		// CPU ratios 0.75, 1, 1, 1.5
		"1.00x (0.75x–1.50x)",
		// UDP 2000..6000; over TCP 2, 3, 4, 5; goroce's share 0.5, 0.5, 0.5, 0.5
		"4500.00 (2000.00–6000.00) MiB/s", "3.50x (2.00x–5.00x) TCP", "0.50x (0.50x–0.50x) of it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}

	// One round without latency or CPU figures: no ranges, no such rows.
	b.Reset()
	PrintSummary(&b, []*Result{{Size: 4096, BW: 100, TCPBW: 50}})
	out = b.String()
	if !strings.Contains(out, "BW average[MiB/sec], 4096 B") || !strings.Contains(out, " 2.00x") || strings.Contains(out, "–") {
		t.Errorf("one round:\n%s", out)
	}
	if strings.Contains(out, "t_typical") || strings.Contains(out, "CPU seconds") || strings.Contains(out, "UDP alone") {
		t.Errorf("rows for figures not measured:\n%s", out)
	}
}

func TestRoundsCount(t *testing.T) {
	if _, err := Rounds(Config{}, 0, &strings.Builder{}); err == nil {
		t.Fatal("Rounds with 0 rounds did not fail")
	}
}
