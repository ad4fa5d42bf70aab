package main

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/verbs"
)

func TestStats(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	if _, errOut, code := runCmd("stats"); code != 1 || !strings.Contains(errOut, "no running goroce device") {
		t.Errorf("no devices: exit %d, %q", code, errOut)
	}
	d, err := verbs.Open(verbs.Config{Addr: netip.MustParseAddr("127.0.5.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, errOut, code := runCmd("stats", "-d", "127.0.5.1")
	if code != 0 || !strings.HasPrefix(out, "goroce_127.0.5.1 (pid ") || !strings.Contains(out, "\n  sent_pkts ") ||
		!strings.Contains(out, "\n  rdma_recvs ") || !strings.Contains(out, "\n  icrc_errors ") {
		t.Errorf("stats -d: exit %d stderr %q\n%s", code, errOut, out)
	}
	out, _, code = runCmd("stats", "-json")
	var v []struct {
		Device   string
		Counters map[string]uint64
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v) != 1 || len(v[0].Counters) != len(stats.PublishedCounters()) {
		t.Errorf("stats -json: exit %d, %v, %s", code, err, out)
	}
	if _, _, code := runCmd("stats", "-d", "127.9.9.9"); code != 1 {
		t.Errorf("unknown device: exit %d", code)
	}
}
