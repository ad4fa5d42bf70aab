package verbs

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/transport"
)

func TestSRQShared(t *testing.T) {
	da, db := newDevices(t)
	srv := newEndpoint(t, db, 1<<16)
	srq, err := srv.pd.CreateSRQ(SRQInitAttr{MaxWR: 64, MaxSGE: 2, Limit: 3})
	must(t, err)
	// Two server QPs on one SRQ, each connected to its own client QP.
	var clients []*endpoint
	var servers []*QP
	for range 2 {
		c := newEndpoint(t, da, 4096)
		qp, err := srv.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: srv.cq, RecvCQ: srv.cq, SRQ: srq,
			Cap: QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
		must(t, err)
		s := &endpoint{dev: db, pd: srv.pd, cq: srv.cq, qp: qp, mr: srv.mr, buf: srv.buf}
		connect(t, c, s, MTU1024)
		clients, servers = append(clients, c), append(servers, qp)
	}
	for i := range 6 {
		_, err := srq.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{srv.mr.SGE(i*1024, 1024)}}})
		must(t, err)
	}
	for i, c := range clients {
		for j := range 2 {
			_, err := c.qp.PostSend([]SendWR{{WRID: uint64(j), Opcode: WRSend, SGL: []SGE{c.mr.SGE(0, 100+i)}}})
			must(t, err)
		}
	}
	wcs := wait(t, srv.cq, 4)
	seen := map[uint32]int{}
	for _, wc := range wcs {
		if wc.Status != WCSuccess || wc.Opcode != WCRecv {
			t.Fatalf("WC %+v", wc)
		}
		seen[wc.QPNum]++
	}
	if seen[servers[0].QPN()] != 2 || seen[servers[1].QPN()] != 2 {
		t.Errorf("completions per QP %v", seen)
	}
	if srq.Len() != 2 {
		t.Errorf("SRQ holds %d WQEs, want 2", srq.Len())
	}
	if ev := expectEvent(t, db, EventSRQLimitReached); ev.SRQ != srq {
		t.Errorf("limit event for %p, want %p", ev.SRQ, srq)
	}
	if _, err := servers[0].PostRecv([]RecvWR{{}}); err == nil {
		t.Error("PostRecv on a QP with an SRQ succeeded")
	}
}

// TestRNR: a SEND before the receive is posted waits (RNR NAK, retry) and
// completes once it is; with rnr_retry 0 it fails with RNR_RETRY_EXC_ERR.
func TestRNR(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 32)}}})
	must(t, err)
	time.Sleep(5 * time.Millisecond)
	if a.cq.Len() != 0 {
		t.Fatal("send completed without a receive posted")
	}
	_, err = b.qp.PostRecv([]RecvWR{{WRID: 2, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Errorf("send after RNR: %+v", wc)
	}
	wait(t, b.cq, 1)

	dc, dd := newDevices(t)
	c, d := newEndpoint(t, dc, 4096), newEndpoint(t, dd, 4096)
	connectRNR(t, c, d, MTU1024, 0)
	_, err = c.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRSend, SGL: []SGE{c.mr.SGE(0, 32)}}})
	must(t, err)
	if wc := wait(t, c.cq, 1)[0]; wc.Status != WCRNRRetryExcErr || wc.WRID != 3 {
		t.Errorf("send with rnr_retry 0: %+v", wc)
	}
	_ = d
}

// TestSignaling: unsignaled WRs produce no completion unless sq_sig_all.
func TestSignaling(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	wrs := []SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	_, err := a.qp.PostSend(wrs)
	must(t, err)
	if wcs := wait(t, a.cq, 1); wcs[0].WRID != 3 {
		t.Errorf("WC %+v, want only WR 3", wcs[0])
	}
	time.Sleep(2 * time.Millisecond)
	if a.cq.Len() != 0 {
		t.Error("unsignaled WRs completed")
	}

	// sq_sig_all
	e := newEndpoint(t, a.dev, 4096)
	sa, err := e.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq, SigAll: true,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	f := newEndpoint(t, b.dev, 4096)
	e.qp = sa
	connect(t, e, f, MTU1024)
	_, err = sa.PostSend([]SendWR{{WRID: 9, Opcode: WRRDMAWrite, SGL: []SGE{e.mr.SGE(0, 8)}, RemoteAddr: f.mr.Addr(), RKey: f.mr.RKey()}})
	must(t, err)
	if wc := wait(t, e.cq, 1)[0]; wc.WRID != 9 || wc.Opcode != WCRDMAWrite {
		t.Errorf("sq_sig_all WC %+v", wc)
	}
}

// TestSolicited: ReqNotify(solicitedOnly) wakes only for a solicited message.
func TestSolicited(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	must(t, b.cq.ReqNotify(true))
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}, {WRID: 2, SGL: []SGE{b.mr.SGE(64, 64)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}}})
	must(t, err)
	wait(t, b.cq, 1)
	if b.ch.TryGet() != nil {
		t.Fatal("notified for an unsolicited message")
	}
	_, err = a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendSolicited, SGL: []SGE{a.mr.SGE(0, 8)}}})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cq, err := b.ch.Get(ctx); err != nil || cq != b.cq {
		t.Fatalf("no notification for a solicited message: %v", err)
	}
}

// TestMultiSGEAndInline: several SGEs on both sides, and inline data that
// may be overwritten right after posting.
func TestMultiSGEAndInline(t *testing.T) {
	a, b := pair(t, 1<<16, MTU1024)
	fill(a.buf, 3)
	want := append(append(append([]byte{}, a.buf[10:1510]...), a.buf[3000:3001]...), a.buf[5000:6000]...)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(100, 700), b.mr.SGE(2000, 1), b.mr.SGE(9000, 5000)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(10, 1500), a.mr.SGE(3000, 1), a.mr.SGE(5000, 1000)}}})
	must(t, err)
	wc := wait(t, b.cq, 1)[0]
	got := append(append(append([]byte{}, b.buf[100:800]...), b.buf[2000:2001]...), b.buf[9000:9000+len(want)-701]...)
	if wc.ByteLen != uint32(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("multi-SGE: %d bytes, data equal %v", wc.ByteLen, bytes.Equal(got, want))
	}
	// Inline: the buffer is reused at once.
	copy(a.buf[:4], "ping")
	_, err = b.qp.PostRecv([]RecvWR{{WRID: 2, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendInline, SGL: []SGE{a.mr.SGE(0, 4)}}})
	must(t, err)
	copy(a.buf[:4], "XXXX")
	wait(t, b.cq, 1)
	if string(b.buf[:4]) != "ping" {
		t.Errorf("inline data %q, want the data at post time", b.buf[:4])
	}
}

// TestInlineAfterRemoteWrite: a poster sends inline, from its own
// goroutine, bytes that a peer's RDMA WRITE put in its MR, having learnt of
// the WRITE only through the peer's completion (over the network, which
// orders nothing for Go). The gather must read them after the responder's
// goroutine wrote them: run with -race, it is the MR's count of remote
// WRITEs that orders the two (memory.Table.collect).
func TestInlineAfterRemoteWrite(t *testing.T) {
	a, b := pairOn(t, newUDPDevices, 1<<16, MTU1024) // in memory, the link's channels would order them
	for i := range 20 {
		fill(a.buf[:64], uint64(i))
		_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr() + 4096, RKey: b.mr.RKey()}})
		must(t, err)
		if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
			t.Fatalf("WRITE %d: %+v", i, wc)
		}
		_, err = a.qp.PostRecv([]RecvWR{{WRID: 2, SGL: []SGE{a.mr.SGE(8192, 64)}}})
		must(t, err)
		_, err = b.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRSend, Flags: SendInline,
			SGL: []SGE{b.mr.SGE(4096, 64)}}})
		must(t, err)
		if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("SEND %d: %+v", i, wc)
		}
		if !bytes.Equal(a.buf[8192:8192+64], a.buf[:64]) {
			t.Fatalf("round %d: the inline SEND did not carry what the WRITE placed", i)
		}
	}
}

// TestInvalidate: SEND_WITH_INV revokes the receiver's R_Key (WC carries
// it), LOCAL_INV revokes a local one; both refuse further access.
func TestInvalidate(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	bkey := b.mr.RKey()
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSendWithInv, InvRKey: bkey, SGL: []SGE{a.mr.SGE(0, 8)}}})
	must(t, err)
	if wc := wait(t, b.cq, 1)[0]; wc.Flags&WCWithInv == 0 || wc.InvRKey != bkey {
		t.Errorf("recv WC %+v, want WITH_INV of 0x%x", wc, bkey)
	}
	_, err = a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: bkey}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCRemAccessErr {
		t.Errorf("write to an invalidated key: %+v", wc)
	}

	c, d := pair(t, 4096, MTU1024)
	ckey := c.mr.RKey()
	_, err = c.qp.PostSend([]SendWR{{WRID: 5, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: ckey}})
	must(t, err)
	if wc := wait(t, c.cq, 1)[0]; wc.Status != WCSuccess || wc.Opcode != WCLocalInv {
		t.Errorf("LOCAL_INV WC %+v", wc)
	}
	_, err = d.qp.PostSend([]SendWR{{WRID: 6, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{d.mr.SGE(0, 8)}, RemoteAddr: c.mr.Addr(), RKey: ckey}})
	must(t, err)
	if wc := wait(t, d.cq, 1)[0]; wc.Status != WCRemAccessErr {
		t.Errorf("read through a locally invalidated key: %+v", wc)
	}
	must(t, c.mr.Rereg(nil, AccessLocalWrite|AccessRemoteRead))
	if c.mr.RKey() == ckey {
		t.Error("Rereg kept the old key")
	}
}

// TestWriteWithImmAndFence: RDMA WRITE with immediate consumes a receive
// WQE; a fenced SEND after a READ sees the READ complete first.
func TestWriteWithImmAndFence(t *testing.T) {
	a, b := pair(t, 1<<16, MTU1024)
	fill(a.buf[:5000], 9)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1}, {WRID: 2, SGL: []SGE{b.mr.SGE(60000, 100)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRRDMAWriteWithImm, Imm: 0x1234, SGL: []SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(20000, 5000)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: WRSend, Flags: SendFence | SendSignaled, SGL: []SGE{a.mr.SGE(20000, 100)}},
	})
	must(t, err)
	r := wait(t, b.cq, 2)
	if r[0].Opcode != WCRecvRDMAWithImm || r[0].Imm != 0x1234 || r[0].ByteLen != 5000 || r[0].WRID != 1 {
		t.Errorf("write-with-imm WC %+v", r[0])
	}
	wait(t, a.cq, 1)
	settle(b.dev)
	if !bytes.Equal(b.buf[100:5100], a.buf[:5000]) || !bytes.Equal(b.buf[60000:60100], a.buf[:100]) {
		t.Error("data differs: the fenced SEND did not carry what the READ brought")
	}
}

func TestCQOverrun(t *testing.T) {
	da, db := newDevices(t)
	a := newEndpoint(t, da, 4096)
	b := newEndpoint(t, db, 4096)
	small, err := da.CreateCQ(2, nil)
	must(t, err)
	qp, err := a.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: small, RecvCQ: small, SigAll: true,
		Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	a.qp = qp
	connect(t, a, b, MTU1024)
	for i := range 4 {
		_, err := qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
		must(t, err)
	}
	if ev := expectEvent(t, da, EventCQErr); ev.CQ != small {
		t.Errorf("CQ error for %p, want %p", ev.CQ, small)
	}
}

// TestCQSizes: a CQ holds exactly the completions it was created for,
// whether or not that is a power of two, hands them out oldest first as
// its ring wraps, and reports an overrun once it is full.
func TestCQSizes(t *testing.T) {
	da, _ := newDevices(t)
	for _, size := range []int{1, 3, 5, 100} {
		cq, err := da.CreateCQ(size, nil)
		must(t, err)
		wc := make([]WC, 2)
		const rounds = 3
		for round := range rounds {
			for i := range size {
				cq.push(WC{WRID: uint64(round*1000 + i)}, false)
			}
			if cq.Len() != size {
				t.Fatalf("CQ of %d, round %d: %d completions after %d pushes", size, round, cq.Len(), size)
			}
			for i := 0; i < size; {
				n := cq.Poll(wc)
				if n == 0 {
					t.Fatalf("CQ of %d, round %d: empty after %d polled", size, round, i)
				}
				for _, c := range wc[:n] {
					if want := uint64(round*1000 + i); c.WRID != want {
						t.Fatalf("CQ of %d, round %d: polled WR %d, want %d", size, round, c.WRID, want)
					}
					i++
				}
			}
		}
		next := uint64(rounds * 1000)
		for i := range size {
			cq.push(WC{WRID: next + uint64(i)}, false)
		}
		select {
		case ev := <-da.Events():
			t.Fatalf("CQ of %d: event %v before it was full", size, ev.Type)
		default:
		}
		cq.push(WC{WRID: next + uint64(size)}, false)
		if ev := expectEvent(t, da, EventCQErr); ev.CQ != cq {
			t.Errorf("CQ of %d: CQ error for %p, want %p", size, ev.CQ, cq)
		}
		if cq.Len() != size {
			t.Errorf("CQ of %d: %d completions after an overrun", size, cq.Len())
		}
	}
}

// TestCloseNoLeak: closing devices with outstanding work never blocks, and
// every goroutine they started ends.
func TestCloseNoLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 3 {
		da, db := newDevices(t)
		a, b := newEndpoint(t, da, 1<<20), newEndpoint(t, db, 1<<20)
		connect(t, a, b, MTU4096)
		// Outstanding: a SEND nobody will receive (RNR forever) and a big READ.
		_, err := a.qp.PostSend([]SendWR{
			{WRID: 1, Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 1<<20)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			{WRID: 2, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 8)}},
		})
		must(t, err)
		done := make(chan struct{})
		go func() { da.Close(); db.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Close blocked")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLargeMessages: 32 MiB moves by WRITE and READ; a message over 2^31
// bytes is refused at post time.
func TestLargeMessages(t *testing.T) {
	a, b := pair(t, 64<<20, MTU4096)
	n := 32 << 20
	fill(a.buf[:n], 11)
	settle(b.dev)
	_, err := a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(n, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess || wc.ByteLen != uint32(n) {
		t.Fatalf("WC %+v", wc)
	}
	if !bytes.Equal(a.buf[n:2*n], a.buf[:n]) {
		t.Fatal("32 MiB WRITE then READ: data differs")
	}
	half := a.mr.SGE(0, 1<<30)
	over := a.mr.SGE(0, 1<<30+1)
	if _, err := a.qp.PostSend([]SendWR{{Opcode: WRSend, SGL: []SGE{half, over}}}); !errors.Is(err, transport.ErrMessageTooLong) {
		t.Errorf("posting 2^31+1 bytes: %v", err)
	}
}

// TestIPv6: devices on IPv6 addresses (over the in-memory link, which
// computes and checks the IPv6 ICRC) use their address as a GID.
func TestIPv6(t *testing.T) {
	a6, b6 := netip.MustParseAddrPort("[fd00::1]:4791"), netip.MustParseAddrPort("[fd00::2]:4791")
	la, lb := memlink.NewPair(a6, b6)
	da, db := openPair(t, Config{Addr: a6.Addr(), Link: la, MTU: 1500}, Config{Addr: b6.Addr(), Link: lb, MTU: 1500})
	if g := da.GIDs(); len(g) != 2 || g[0].String()[:6] != "fe80::" || g[1].String() != "fd00::1" || da.GIDIndex() != 1 {
		t.Errorf("GID table %v, index %d", g, da.GIDIndex())
	}
	if da.QueryPort().ActiveMTU != MTU1024 {
		t.Errorf("active MTU %v on a 1500-byte interface, want 1024", da.QueryPort().ActiveMTU)
	}
	a, b := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
	connect(t, a, b, MTU1024)
	fill(a.buf[:5000], 5)
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 8192)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 5000)}}})
	must(t, err)
	if wc := wait(t, b.cq, 1)[0]; wc.ByteLen != 5000 || !bytes.Equal(b.buf[:5000], a.buf[:5000]) {
		t.Errorf("IPv6 SEND: %+v", wc)
	}
	// An IPv4 peer cannot be reached from an IPv6 device.
	e := newEndpoint(t, da, 64)
	must(t, e.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1}, AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	err = e.qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024, AH: AHAttr{IsGlobal: true, DGID: GIDFromAddr(netip.MustParseAddr("127.0.0.1"))}},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer)
	if err == nil {
		t.Error("an IPv6 device accepted an IPv4 peer")
	}
}

// TestSQD: in SQD the send queue stops taking new work; back in RTS the
// posted work goes out.
func TestSQD(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	must(t, a.qp.Modify(&QPAttr{State: QPSSQD}, AttrState))
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	time.Sleep(5 * time.Millisecond)
	if a.cq.Len() != 0 {
		t.Fatal("a WR posted in SQD was executed")
	}
	must(t, a.qp.Modify(&QPAttr{State: QPSRTS}, AttrState))
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Errorf("after SQD→RTS: %+v", wc)
	}
}
