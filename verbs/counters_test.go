package verbs

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/stats"
)

// TestCounters: the counters follow what happened, with rxe's names.
func TestCounters(t *testing.T) {
	a, b := pair(t, 1<<16, MTU1024)
	// An RNR wait, then a 5000-byte SEND (5 packets) and its completion.
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 5000)}}})
	must(t, err)
	for deadline := time.Now().Add(10 * time.Second); b.dev.Counters()["send_rnr_err"] == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no RNR NAK for a SEND without a receive")
		}
		time.Sleep(100 * time.Microsecond)
	}
	_, err = b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 8192)}}})
	must(t, err)
	for deadline := time.Now().Add(10 * time.Second); a.cq.Len() == 0; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the SEND never completed:\n a %s\n b %s", a.qp.Debug(), b.qp.Debug())
		}
	}
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("SEND after RNR waits: %+v", wc)
	}
	wait(t, b.cq, 1)
	// Retried packets may still be in flight: wait for the two sides'
	// counts to agree.
	ca, cb := a.dev.Counters(), b.dev.Counters()
	for deadline := time.Now().Add(5 * time.Second); ca["sent_pkts"] != cb["rcvd_pkts"] || cb["sent_pkts"] != ca["rcvd_pkts"]; {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
		ca, cb = a.dev.Counters(), b.dev.Counters()
	}
	check := func(name string, got uint64, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s = %d", name, got)
		}
	}
	check("a rdma_sends", ca["rdma_sends"], ca["rdma_sends"] == 1)
	check("b rdma_recvs", cb["rdma_recvs"], cb["rdma_recvs"] == 1)
	check("b send_rnr_err", cb["send_rnr_err"], cb["send_rnr_err"] >= 1)
	check("a rcvd_rnr_err", ca["rcvd_rnr_err"], ca["rcvd_rnr_err"] == cb["send_rnr_err"])
	check("a sent_pkts", ca["sent_pkts"], ca["sent_pkts"] >= 5 && ca["sent_pkts"] == cb["rcvd_pkts"])
	check("b sent_pkts", cb["sent_pkts"], cb["sent_pkts"] >= 2 && cb["sent_pkts"] == ca["rcvd_pkts"])
	check("a sent_bytes", ca["sent_bytes"], ca["sent_bytes"] >= 5000 && ca["sent_bytes"] == cb["rcvd_bytes"])
	for _, n := range []string{"icrc_errors", "malformed", "socket_drops", "duplicate_request", "out_of_seq_request", "retry_exceeded_err", "link_downed"} {
		check("a "+n, ca[n], ca[n] == 0)
	}
	if len(ca) != len(stats.PublishedCounters()) {
		t.Errorf("%d counters, want %d", len(ca), len(stats.PublishedCounters()))
	}
}

// TestCountersBeforeCompletion: a packet is counted received before the
// completion it brings can be polled, on every link, so that a tool that
// prints its counters after its last completion (the pingpong tools with
// GOROCE_PRINT_COUNTERS=1) counts every packet. The test holds the
// receiver's completion channel, which the CQ posts to as it pushes the
// completion: the worker that pushed it waits there, before it would
// have counted the rest of its batch, while the test reads the counters.
func TestCountersBeforeCompletion(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			for i := range 3 {
				_, err := b.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}}})
				must(t, err)
				must(t, b.cq.ReqNotify(false))
				before := b.dev.Counters()["rcvd_pkts"]
				b.ch.mu.Lock()
				_, err = a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 64)}}})
				if err != nil {
					b.ch.mu.Unlock()
					t.Fatal(err)
				}
				for deadline := time.Now().Add(10 * time.Second); b.cq.Len() == 0; time.Sleep(20 * time.Microsecond) {
					if time.Now().After(deadline) {
						b.ch.mu.Unlock()
						t.Fatal("no receive completion")
					}
				}
				got := b.dev.Counters()["rcvd_pkts"]
				b.ch.mu.Unlock()
				if got != before+1 {
					t.Fatalf("SEND %d: rcvd_pkts %d with its completion in the CQ, want %d", i, got, before+1)
				}
				wait(t, b.cq, 1)
				wait(t, a.cq, 1)
				<-b.ch.C() // the event the armed CQ posted
			}
		})
	}
}

// TestCountersDocumented: docs/VERBS.md names every counter a device
// publishes, as Device.Counters says it does.
func TestCountersDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/VERBS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range stats.PublishedCounters() {
		if !strings.Contains(string(doc), "`"+c.String()+"`") {
			t.Errorf("docs/VERBS.md does not name the counter %s", c)
		}
	}
}
