package verbs

import (
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"
)

// startPeer runs the peer process (see runPeer) on addr and returns its
// details, the command and the encoder to answer it.
func startPeer(t *testing.T, addr string) (peerInfo, *exec.Cmd, *json.Encoder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOROCE_TEST_PEER="+addr)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var p peerInfo
	if err := json.NewDecoder(stdout).Decode(&p); err != nil {
		t.Fatalf("peer details: %v", err)
	}
	return p, cmd, json.NewEncoder(stdin)
}

// TestPeerDies kills the peer process in the middle of a transfer. Every
// outstanding WR must complete with an error within timeout × (retry_cnt
// + 1) of the last sign of life, and closing the survivor's device must
// give back its goroutines and memory.
func TestPeerDies(t *testing.T) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	for round := range 3 {
		var elapsed time.Duration
		for try := 0; ; try++ {
			var ok bool
			if elapsed, ok = killPeerMidTransfer(t, round); ok {
				break
			}
			// The peer was too slow for the short timeout before it was
			// killed (a loaded machine): that round proves nothing.
			if try == 4 {
				t.Fatalf("round %d: the live peer never kept up with the %v ACK timeout", round, ackTimeout)
			}
			t.Logf("round %d: the first WR failed before the peer was killed; again", round)
		}
		t.Logf("round %d: every WR failed %v after the peer died", round, elapsed)
		// retry_cnt 3 → 4 timeouts.
		if bound := 4 * ackTimeout; elapsed > bound+150*time.Millisecond {
			t.Errorf("round %d: outstanding WRs failed %v after the peer died; bound %v", round, elapsed, bound)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Errorf("%d goroutines before, %d after", goroutines, n)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapInuse) - int64(before.HeapInuse); grown > 8<<20 {
		t.Errorf("heap grew by %d KiB over three dead peers", grown>>10)
	}
}

// The dead peer tests' ACK timeout: 4.096 µs × 2^timeoutExp.
const (
	timeoutExp = 12
	ackTimeout = 4096 << timeoutExp * time.Nanosecond
)

// killPeerMidTransfer returns how long after the kill every WR had failed,
// and false if the transfer failed before the kill.
func killPeerMidTransfer(t *testing.T, round int) (time.Duration, bool) {
	peerAddr, ourAddr := "127.0.4.3", "127.0.4.4"
	peer, cmd, enc := startPeer(t, peerAddr)
	dev, err := Open(Config{Addr: netip.MustParseAddr(ourAddr)})
	must(t, err)
	defer dev.Close()
	e := newEndpoint(t, dev, 4<<20)
	enc.Encode(peerInfo{ourAddr, e.qp.QPN(), e.mr.Addr(), e.mr.RKey()})
	// Short timeouts so the test is quick: 4.096 µs × 2^12, three retries,
	// and rnr_retry 7, which must not turn a dead peer into a hang.
	must(t, connectTimeout(e, peer, 0, timeoutExp, 3))
	wrs := make([]SendWR, 100)
	for i := range wrs {
		wrs[i] = SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{e.mr.SGE(0, 1<<20)},
			RemoteAddr: peer.Addr0 + 6<<20, RKey: peer.RKey}
	}
	_, err = e.qp.PostSend(wrs)
	must(t, err)
	if wc := wait(t, e.cq, 1)[0]; wc.Status != WCSuccess { // the transfer is under way
		cmd.Process.Kill()
		cmd.Wait()
		return 0, false
	}
	cmd.Process.Kill()
	cmd.Wait()
	killed := time.Now()
	wcs := wait(t, e.cq, 99)
	elapsed := time.Since(killed)
	failed := false
	for _, wc := range wcs {
		switch {
		case wc.Status == WCSuccess && !failed:
		case wc.Status == WCRetryExcErr && !failed:
			failed = true
		case wc.Status == WCWRFlushErr && failed:
		default:
			t.Fatalf("round %d: WC %+v after failed=%v", round, wc, failed)
		}
	}
	if !failed {
		t.Fatalf("round %d: no WR failed after the peer died", round)
	}
	waitState(t, e.qp, QPSErr)
	return elapsed, true
}

// TestDestroyNeverBlocks: with rnr_retry 7 (forever) and a peer that keeps
// answering RNR, destroying the QP, the PD and the device returns at once.
func TestDestroyNeverBlocks(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 64)}}})
	must(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for b.dev.Counters()["send_rnr_err"] < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if b.dev.Counters()["send_rnr_err"] < 3 {
		t.Fatal("the peer is not answering RNR")
	}
	done := make(chan struct{})
	go func() {
		a.qp.Destroy()
		a.pd.Dealloc()
		a.dev.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("destroying a QP stuck in RNR retries blocked")
	}
}
