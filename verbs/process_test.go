package verbs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The peer process: the test binary run again with GOROCE_TEST_PEER set to
// an address. It opens a device there, prints its connection details as a
// JSON line, reads the test's, connects, and then echoes: every message it
// receives (SEND, or RDMA WRITE with immediate) it sends back as a SEND of
// the same bytes with the immediate plus one, until its stdin closes.

type peerInfo struct {
	Addr  string
	QPN   uint32
	Addr0 uint64 // the MR's address
	RKey  uint32
}

func TestMain(m *testing.M) {
	if addr := os.Getenv("GOROCE_TEST_PEER"); addr != "" {
		if err := runPeer(addr, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runPeer(addr string, in io.Reader, out io.Writer) error {
	dev, err := Open(Config{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		return err
	}
	defer dev.Close()
	e := &endpoint{dev: dev}
	if e.pd, err = dev.AllocPD(); err != nil {
		return err
	}
	if e.cq, err = dev.CreateCQ(1024, nil); err != nil {
		return err
	}
	e.buf = make([]byte, 8<<20)
	if e.mr, err = e.pd.RegMR(e.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic); err != nil {
		return err
	}
	if e.qp, err = e.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	json.NewEncoder(out).Encode(peerInfo{addr, e.qp.QPN(), e.mr.Addr(), e.mr.RKey()})
	sc := bufio.NewScanner(in)
	if !sc.Scan() {
		return fmt.Errorf("no peer details: %v", sc.Err())
	}
	var p peerInfo
	if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
		return err
	}
	if err := connectTo(e, p, 0); err != nil {
		return err
	}
	// The receive half is the first 4 MiB, replies go from the second.
	const half = 4 << 20
	for i := range 16 {
		if _, err := e.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{e.mr.SGE(0, half)}}}); err != nil {
			return err
		}
	}
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, in); close(done) }()
	wc := make([]WC, 8)
	for {
		select {
		case <-done:
			return nil
		default:
		}
		n := e.cq.Poll(wc)
		if n == 0 {
			time.Sleep(20 * time.Microsecond)
			continue
		}
		for _, c := range wc[:n] {
			if c.Status != WCSuccess {
				return fmt.Errorf("peer WC %+v", c)
			}
			if c.Opcode&WCRecv == 0 {
				continue
			}
			m := int(c.ByteLen)
			if c.Opcode == WCRecvRDMAWithImm {
				m = 0 // the data went where the writer put it
			}
			copy(e.buf[half:], e.buf[:m])
			if _, err := e.qp.PostRecv([]RecvWR{{WRID: c.WRID, SGL: []SGE{e.mr.SGE(0, half)}}}); err != nil {
				return err
			}
			if _, err := e.qp.PostSend([]SendWR{{Opcode: WRSendWithImm, Imm: c.Imm + 1, SGL: []SGE{e.mr.SGE(half, m)}}}); err != nil {
				return err
			}
		}
	}
}

// connectTo connects e's QP to the peer described by p.
func connectTo(e *endpoint, p peerInfo, psn uint32) error { return connectTimeout(e, p, psn, 14, 7) }

// connectTimeout is connectTo with the ACK timeout and retry count given.
func connectTimeout(e *endpoint, p peerInfo, psn uint32, timeout, retry uint8) error {
	qp := e.qp
	if err := qp.Modify(&QPAttr{State: QPSInit, PortNum: 1,
		AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic},
		AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags); err != nil {
		return err
	}
	ah := AHAttr{IsGlobal: true, DGID: GIDFromAddr(netip.MustParseAddr(p.Addr)), SGIDIndex: uint8(e.dev.GIDIndex())}
	if err := qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU4096, DestQPN: p.QPN, RQPSN: psn, AH: ah,
		MaxDestRdAtomic: 16, MinRNRTimer: 1},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&QPAttr{State: QPSRTS, SQPSN: psn, Timeout: timeout, RetryCnt: retry, RNRRetry: 7, MaxRdAtomic: 16},
		AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic)
}

// TestTwoProcesses runs every operation against a device in another
// process on the same host, over UDP on two loopback addresses, and again
// with both devices on the same-host path (Config.SameHost, which the peer
// gets from GOROCE_SAMEHOST), where no packet may take the socket.
func TestTwoProcesses(t *testing.T) {
	t.Run("udp", func(t *testing.T) { twoProcesses(t, "127.0.4.1", "127.0.4.2", false) })
	t.Run("samehost", func(t *testing.T) { twoProcesses(t, "127.0.5.1", "127.0.5.2", true) })
}

func twoProcesses(t *testing.T, peerAddr, ourAddr string, sameHost bool) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOROCE_TEST_PEER="+peerAddr, "GOROCE_SAMEHOST=0")
	if sameHost {
		cmd.Env = append(cmd.Env, "GOROCE_SAMEHOST=1")
	}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("peer process: %v", err)
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			t.Error("peer process did not exit")
		}
	})
	var peer peerInfo
	if err := json.NewDecoder(stdout).Decode(&peer); err != nil {
		t.Fatalf("peer details: %v", err)
	}
	dev, err := Open(Config{Addr: netip.MustParseAddr(ourAddr), SameHost: sameHost})
	must(t, err)
	defer dev.Close()
	defer func() {
		c := dev.Counters()
		switch {
		case sameHost && (c["samehost_pkts"] != c["sent_pkts"] || c["sent_pkts"] == 0):
			t.Errorf("same-host: %d of %d packets sent through shared memory", c["samehost_pkts"], c["sent_pkts"])
		case !sameHost && c["samehost_pkts"] != 0:
			t.Errorf("UDP: %d packets sent through shared memory", c["samehost_pkts"])
		}
	}()
	e := newEndpoint(t, dev, 8<<20)
	json.NewEncoder(stdin).Encode(peerInfo{ourAddr, e.qp.QPN(), e.mr.Addr(), e.mr.RKey()})
	must(t, connectTo(e, peer, 0))

	const in = 4 << 20 // our receive area
	post := func(wrs ...SendWR) {
		t.Helper()
		_, err := e.qp.PostSend(wrs)
		must(t, err)
	}
	for i, n := range []int{0, 1, 4095, 4096, 4097, 1 << 20} {
		fill(e.buf[:n], uint64(i))
		// SEND, echoed back.
		_, err := e.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{e.mr.SGE(in, in)}}})
		must(t, err)
		post(SendWR{WRID: 1, Opcode: WRSendWithImm, Imm: uint32(i), SGL: []SGE{e.mr.SGE(0, n)}})
		got := waitRecv(t, e.cq)
		if got.ByteLen != uint32(n) || got.Imm != uint32(i)+1 || !bytes.Equal(e.buf[in:in+n], e.buf[:n]) {
			t.Fatalf("size %d: SEND echo %+v, data equal %v", n, got, bytes.Equal(e.buf[in:in+n], e.buf[:n]))
		}
		// RDMA WRITE into the peer's second half, READ it back.
		post(
			SendWR{WRID: 2, Opcode: WRRDMAWrite, SGL: []SGE{e.mr.SGE(0, n)}, RemoteAddr: peer.Addr0 + 6<<20, RKey: peer.RKey},
			SendWR{WRID: 3, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{e.mr.SGE(in, n)}, RemoteAddr: peer.Addr0 + 6<<20, RKey: peer.RKey},
		)
		if wc := wait(t, e.cq, 1)[0]; wc.Status != WCSuccess || wc.WRID != 3 || !bytes.Equal(e.buf[in:in+n], e.buf[:n]) {
			t.Fatalf("size %d: WRITE+READ %+v", n, wc)
		}
		// RDMA WRITE with immediate: the peer answers with imm+1.
		_, err = e.qp.PostRecv([]RecvWR{{WRID: 4, SGL: []SGE{e.mr.SGE(in, in)}}})
		must(t, err)
		post(SendWR{WRID: 4, Opcode: WRRDMAWriteWithImm, Imm: 1000 + uint32(i), SGL: []SGE{e.mr.SGE(0, n)}, RemoteAddr: peer.Addr0 + 5<<20, RKey: peer.RKey})
		if got := waitRecv(t, e.cq); got.Imm != 1001+uint32(i) {
			t.Fatalf("size %d: WRITE_WITH_IMM answered with %+v", n, got)
		}
	}
	// Atomics on the peer's memory.
	target := peer.Addr0 + 7<<20
	post(
		SendWR{WRID: 5, Opcode: WRAtomicCmpAndSwp, SGL: []SGE{e.mr.SGE(0, 8)}, RemoteAddr: target, RKey: peer.RKey, CompareAdd: 0, Swap: 100},
		SendWR{WRID: 6, Opcode: WRAtomicFetchAndAdd, SGL: []SGE{e.mr.SGE(8, 8)}, RemoteAddr: target, RKey: peer.RKey, CompareAdd: 23},
		SendWR{WRID: 7, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{e.mr.SGE(16, 8)}, RemoteAddr: target, RKey: peer.RKey, CompareAdd: 1},
	)
	wait(t, e.cq, 1)
	old := []uint64{binary.NativeEndian.Uint64(e.buf[0:]), binary.NativeEndian.Uint64(e.buf[8:]), binary.NativeEndian.Uint64(e.buf[16:])}
	if old[0] != 0 || old[1] != 100 || old[2] != 123 {
		t.Errorf("atomics returned %v, want [0 100 123]", old)
	}
}

// waitRecv waits for the next receive completion, skipping send ones.
func waitRecv(t *testing.T, cq *CQ) WC {
	t.Helper()
	for {
		wc := wait(t, cq, 1)[0]
		if wc.Status != WCSuccess {
			t.Fatalf("WC %+v", wc)
		}
		if wc.Opcode&WCRecv != 0 {
			return wc
		}
	}
}
