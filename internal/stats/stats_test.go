package stats

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

func TestCountersConcurrent(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Inc(SentPkts)
				c.Add(SentBytes, 3)
			}
		})
	}
	wg.Wait()
	if s := c.Snapshot(); s[SentPkts] != 8000 || s[SentBytes] != 24000 {
		t.Errorf("snapshot %v", s)
	}
	var none *Counters
	none.Inc(SentPkts) // a nil *Counters ignores increments
}

func TestNamesAreRxes(t *testing.T) {
	rxe := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request", "rcvd_rnr_err",
		"send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err", "retry_rnr_exceeded_err",
		"completer_retry_err", "send_err", "link_downed", "rdma_sends", "rdma_recvs"}
	for i, n := range rxe {
		if Counter(i).String() != n {
			t.Errorf("counter %d is %q, rxe calls it %q", i, Counter(i), n)
		}
	}
}

func TestPublishAndList(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	p, err := Publish("goroce_127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	p.Add(RcvdPkts, 42)
	p.Inc(ICRCErrors)
	// A stale file of a process that exited.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Skip(err)
	}
	stale, err := Publish("goroce_stale")
	if err != nil {
		t.Fatal(err)
	}
	stalePath := stale.path
	writePID(t, stale.mem, cmd.Process.Pid)
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "goroce_127.0.0.1" || devs[0].PID != os.Getpid() ||
		devs[0].Counters[RcvdPkts] != 42 || devs[0].Counters[ICRCErrors] != 1 {
		t.Fatalf("List = %+v", devs)
	}
	if _, err := os.Stat(stalePath); !os.IsNotExist(err) {
		t.Errorf("stale file %s not removed", filepath.Base(stalePath))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if devs, _ := List(); len(devs) != 0 {
		t.Errorf("after Close: %+v", devs)
	}
}

func writePID(t *testing.T, mem []byte, pid int) {
	t.Helper()
	binary.NativeEndian.PutUint64(mem[8:], uint64(pid))
}

// TestListShortFile: List must skip a file shorter than the counters (one
// being created, or of another layout) rather than map past its end, which
// would kill the process with SIGBUS.
func TestListShortFile(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	p, err := Publish("goroce_short_test")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	short := filepath.Join(Dir(), fileName("goroce_other.1"))
	if err := os.WriteFile(short, []byte(magic), 0o600); err != nil {
		t.Fatal(err)
	}
	devs, err := List()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].Name != "goroce_short_test" {
		t.Fatalf("List = %+v, want only the published device", devs)
	}
}

// TestTable: every counter has a unique name, a description, and the
// published ones come first, rxe's fifteen at their head.
func TestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range All() {
		in := c.Info()
		if in.Name == "" || in.Doc == "" || seen[in.Name] {
			t.Errorf("counter %d: name %q (repeated: %v), doc %q", c, in.Name, seen[in.Name], in.Doc)
		}
		seen[in.Name] = true
	}
	for i, c := range PublishedCounters() {
		if c != Counter(i) {
			t.Fatalf("published counter %d is %v: unpublished ones must come after the published", i, c)
		}
	}
	m := Snapshot{}.Map()
	if len(m) != len(PublishedCounters()) || m["link_sent_pkts"] != 0 {
		t.Errorf("Map has %d names, want the %d published", len(m), len(PublishedCounters()))
	}
	for _, c := range FromLink() {
		if in := c.Info(); in.Source != ByLink || !in.Published {
			t.Errorf("%v copied from the link: %+v", c, in)
		}
	}
}
