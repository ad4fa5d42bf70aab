package verbs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/link/memlink"
	"github.com/goroce/goroce/internal/stats"
)

// endpoint is one side of a connected RC pair used by the tests.
type endpoint struct {
	dev *Device
	pd  *PD
	cq  *CQ
	ch  *CompChannel
	qp  *QP
	mr  *MR
	buf []byte
}

// newDevices opens two devices joined by an in-memory link.
func newDevices(t testing.TB) (*Device, *Device) {
	t.Helper()
	a, b := netip.MustParseAddrPort("198.18.0.1:4791"), netip.MustParseAddrPort("198.18.0.2:4791")
	la, lb := memlink.NewPair(a, b)
	return openPair(t, Config{Addr: a.Addr(), Link: la, MTU: 9000}, Config{Addr: b.Addr(), Link: lb, MTU: 9000})
}

// faultyPair returns a memory pair with fault stages in front of its ends:
// ab is what the first does wrong to the packets it sends, ba the second.
func faultyPair(t testing.TB, a, b netip.AddrPort, ab, ba fault.Config) (link.Link, link.Link) {
	t.Helper()
	ma, mb := memlink.NewPair(a, b)
	wrap := func(l *memlink.Link, c fault.Config) link.Link {
		if !c.Active() {
			return l
		}
		w, err := fault.Wrap(l, c)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	return wrap(ma, ab), wrap(mb, ba)
}

// udpHost hands out loopback addresses to this package's tests; other
// packages' tests use other 127.0.x.0/24 ranges.
var udpHost atomic.Uint32

// newUDPDevices opens two devices on real UDP sockets on two loopback
// addresses (127.0.1.x), port 4791.
func newUDPDevices(t testing.TB) (*Device, *Device) {
	t.Helper()
	n := udpHost.Add(2)
	a := netip.AddrFrom4([4]byte{127, 0, 1, byte(n - 1)})
	b := netip.AddrFrom4([4]byte{127, 0, 1, byte(n)})
	return openPair(t, Config{Addr: a}, Config{Addr: b})
}

// newSameHostDevices opens two devices like newUDPDevices, with the
// same-host path (Config.SameHost): their packets go through shared memory.
func newSameHostDevices(t testing.TB) (*Device, *Device) {
	t.Helper()
	a, b := sameHostAddrs()
	return openPair(t, Config{Addr: a, SameHost: true}, Config{Addr: b, SameHost: true})
}

// sameHostAddrs returns two loopback addresses no other test uses.
func sameHostAddrs() (a, b netip.Addr) {
	n := udpHost.Add(2)
	return netip.AddrFrom4([4]byte{127, 0, 1, byte(n - 1)}), netip.AddrFrom4([4]byte{127, 0, 1, byte(n)})
}

func openPair(t testing.TB, ca, cb Config) (*Device, *Device) {
	t.Helper()
	da, err := Open(ca)
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(cb)
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// links are the ways the tests join two devices.
var links = []struct {
	name string
	open func(testing.TB) (*Device, *Device)
}{{"mem", newDevices}, {"udp", newUDPDevices}, {"samehost", newSameHostDevices}}

func newEndpoint(t testing.TB, d *Device, size int) *endpoint {
	t.Helper()
	e := &endpoint{dev: d, ch: NewCompChannel()}
	var err error
	if e.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if e.cq, err = d.CreateCQ(4096, e.ch); err != nil {
		t.Fatal(err)
	}
	e.buf = make([]byte, size)
	if e.mr, err = e.pd.RegMR(e.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// connect moves both QPs to RTS, each pointing at the other.
func connect(t testing.TB, a, b *endpoint, mtu MTU) { connectRNR(t, a, b, mtu, 7) }

// connectRNR is connect with a's rnr_retry set.
func connectRNR(t testing.TB, a, b *endpoint, mtu MTU, rnrRetry uint8) {
	t.Helper()
	connectPair(t, a, b, mtu, rnrRetry, 14)
}

// connectPair is connectRNR with both QPs' local ACK timeout set.
func connectPair(t testing.TB, a, b *endpoint, mtu MTU, rnrRetry, timeout uint8) {
	t.Helper()
	psnA, psnB := uint32(0x5a14bc), uint32(0xfffff0) // b's PSNs wrap during the tests
	for _, s := range []struct {
		e, peer *endpoint
		sq, rq  uint32
	}{{a, b, psnA, psnB}, {b, a, psnB, psnA}} {
		qp := s.e.qp
		must(t, qp.Modify(&QPAttr{State: QPSInit, PKeyIndex: 0, PortNum: 1,
			AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		ah := AHAttr{IsGlobal: true, DGID: GIDFromAddr(s.peer.dev.Addr().Addr()), SGIDIndex: uint8(s.e.dev.GIDIndex()), HopLimit: 64}
		must(t, qp.Modify(&QPAttr{State: QPSRTR, PathMTU: mtu, DestQPN: s.peer.qp.QPN(), RQPSN: s.rq, AH: ah,
			MaxDestRdAtomic: 16, MinRNRTimer: 1},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
		rnr := uint8(7)
		if s.e == a {
			rnr = rnrRetry
		}
		must(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: s.sq, Timeout: timeout, RetryCnt: 7, RNRRetry: rnr, MaxRdAtomic: 16},
			AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic))
	}
}

// settle is a memory barrier between the test and d's workers: it waits
// until they finished what they were doing, so the test may read memory
// peers wrote through d, and the workers see what the test wrote before.
// Programs get the same ordering from completions and posts.
func settle(d *Device) { d.eng.Settle() }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wait polls cq until n completions arrived or the deadline passed.
func wait(t testing.TB, cq *CQ, n int) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, 16)
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions: %+v", len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

func pair(t testing.TB, size int, mtu MTU) (*endpoint, *endpoint) {
	return pairOn(t, newDevices, size, mtu)
}

func pairOn(t testing.TB, open func(testing.TB) (*Device, *Device), size int, mtu MTU) (*endpoint, *endpoint) {
	da, db := open(t)
	a, b := newEndpoint(t, da, size), newEndpoint(t, db, size)
	connect(t, a, b, mtu)
	return a, b
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

var sizesFor = func(mtu int) []int { return []int{0, 1, mtu - 1, mtu, mtu + 1, 3*mtu + 7, 1 << 20} }

func TestSendRecv(t *testing.T) {
	for _, lk := range links {
		for _, mtu := range []MTU{MTU1024, MTU4096} {
			t.Run(lk.name+"/"+fmt.Sprint(mtu), func(t *testing.T) {
				a, b := pairOn(t, lk.open, 2<<20, mtu)
				for i, n := range sizesFor(mtu.Bytes()) {
					fill(a.buf[:n], uint64(i))
					clear(b.buf)
					_, err := b.qp.PostRecv([]RecvWR{{WRID: 100 + uint64(i), SGL: []SGE{b.mr.SGE(0, 1<<20+100)}}})
					must(t, err)
					_, err = a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRSendWithImm, Flags: SendSignaled, Imm: 0xc0ffee00 + uint32(i),
						SGL: []SGE{a.mr.SGE(0, n)}}})
					must(t, err)
					s := wait(t, a.cq, 1)[0]
					r := wait(t, b.cq, 1)[0]
					if s.Status != WCSuccess || s.Opcode != WCSend || s.WRID != uint64(i) {
						t.Fatalf("size %d: send WC %+v", n, s)
					}
					if r.Status != WCSuccess || r.Opcode != WCRecv || r.ByteLen != uint32(n) || r.Flags&WCWithImm == 0 ||
						r.Imm != 0xc0ffee00+uint32(i) || r.WRID != 100+uint64(i) || r.SrcQP != a.qp.QPN() {
						t.Fatalf("size %d: recv WC %+v", n, r)
					}
					if !bytes.Equal(b.buf[:n], a.buf[:n]) {
						t.Fatalf("size %d: received data differs", n)
					}
				}
			})
		}
	}
}

func TestWriteRead(t *testing.T) {
	for _, lk := range links {
		for _, mtu := range []MTU{MTU1024, MTU4096} {
			t.Run(lk.name+"/"+fmt.Sprint(mtu), func(t *testing.T) {
				a, b := pairOn(t, lk.open, 4<<20, mtu)
				for i, n := range sizesFor(mtu.Bytes()) {
					fill(a.buf[:n], uint64(i)+7)
					settle(b.dev) // the last check read b\'s memory
					_, err := a.qp.PostSend([]SendWR{
						{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, n)}, RemoteAddr: b.mr.Addr() + 3, RKey: b.mr.RKey()},
						{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(2<<20, n)},
							RemoteAddr: b.mr.Addr() + 3, RKey: b.mr.RKey()},
					})
					must(t, err)
					wc := wait(t, a.cq, 1)[0]
					if wc.Status != WCSuccess || wc.Opcode != WCRDMARead || wc.WRID != 2 || wc.ByteLen != uint32(n) {
						t.Fatalf("size %d: read WC %+v", n, wc)
					}
					settle(b.dev)
					if !bytes.Equal(b.buf[3:3+n], a.buf[:n]) || !bytes.Equal(a.buf[2<<20:2<<20+n], a.buf[:n]) {
						t.Fatalf("size %d: data differs after WRITE then READ", n)
					}
				}
			})
		}
	}
}

func TestAtomics(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) { testAtomics(t, lk.open) })
	}
}

func testAtomics(t *testing.T, open func(testing.TB) (*Device, *Device)) {
	a, b := pairOn(t, open, 4096, MTU1024)
	target := b.mr.Addr() + 64
	put := func(v uint64) {
		for i := range 8 {
			b.buf[64+i] = byte(v >> (8 * i))
		}
	}
	get := func(buf []byte) uint64 {
		var v uint64
		for i := range 8 {
			v |= uint64(buf[i]) << (8 * i)
		}
		return v
	}
	put(40)
	settle(b.dev)
	_, err := a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: target, RKey: b.mr.RKey(), CompareAdd: 2},
		{WRID: 2, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(8, 8)}, RemoteAddr: target, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 7},
		{WRID: 3, Opcode: WRAtomicCmpAndSwp, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(16, 8)}, RemoteAddr: target, RKey: b.mr.RKey(), CompareAdd: 42, Swap: 9},
	})
	must(t, err)
	wcs := wait(t, a.cq, 3)
	for i, wc := range wcs {
		if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
			t.Fatalf("WC %d: %+v", i, wc)
		}
	}
	settle(b.dev)
	if got := []uint64{get(a.buf[0:]), get(a.buf[8:]), get(a.buf[16:]), get(b.buf[64:])}; got[0] != 40 || got[1] != 42 || got[2] != 7 || got[3] != 7 {
		t.Fatalf("fetch-add old %d, cmp-swap old %d and %d, final %d; want 40, 42, 7, 7", got[0], got[1], got[2], got[3])
	}
}

func TestCompChannel(t *testing.T) {
	a, b := pair(t, 4096, MTU1024)
	must(t, b.cq.ReqNotify(false))
	_, err := b.qp.PostRecv([]RecvWR{{WRID: 9, SGL: []SGE{b.mr.SGE(0, 64)}}})
	must(t, err)
	_, err = a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 10)}}})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cq, err := b.ch.Get(ctx)
	if err != nil || cq != b.cq {
		t.Fatalf("Get: %v %v", cq, err)
	}
	if wc := wait(t, b.cq, 1)[0]; wc.WRID != 9 || wc.ByteLen != 10 {
		t.Fatalf("WC %+v", wc)
	}
}

// TestRemoteWritesPolling plays perftest's write latency ping-pong: each
// side WRITEs to the other and watches its own memory for the answer, with
// MR.RemoteWrites as the only synchronisation. -race proves each read is
// ordered after the placement it waited for, and before the next one (the
// reader's own post hands its worker the baton).
func TestRemoteWritesPolling(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			a, b := pairOn(t, lk.open, 1<<16, MTU1024)
			if n := b.mr.RemoteWrites(); n != 0 {
				t.Fatalf("fresh MR: RemoteWrites = %d", n)
			}
			const size = 3000 // three packets: one message, or three over UDP (Config.WholeWrites)
			sleep := func() { time.Sleep(10 * time.Microsecond) }
			ping := func(from, to *endpoint, i int) {
				pingWrite(t, from, to, i, size, sleep)
				if wc := wait(t, from.cq, 1)[0]; wc.Status != WCSuccess {
					t.Fatalf("write %d: %+v", i, wc)
				}
			}
			for i := 1; i <= 20; i++ {
				ping(a, b, i)
				ping(b, a, i)
			}
		})
	}
}

// pingWrite RDMA WRITEs size bytes from from's buffer (at 32 KiB) to the
// start of to's, the last byte being i, and waits, calling idle between
// looks, until to's MR has counted the bytes of i remote writes (and at
// least i messages); then it checks the byte.
func pingWrite(t *testing.T, from, to *endpoint, i, size int, idle func()) {
	t.Helper()
	// Each round sends from a source of its own (as many as fit), as a
	// program must: the WRITE of an earlier round may not have completed
	// yet, and its retry reads its source again.
	const out = 1 << 15
	src := out + i%(out/size)*size
	from.buf[src+size-1] = byte(i)
	_, err := from.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{from.mr.SGE(src, size)}, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}})
	must(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for to.mr.RemoteWriteBytes() != uint64(i*size) {
		if time.Now().After(deadline) {
			t.Fatalf("write %d: RemoteWriteBytes = %d, want %d", i, to.mr.RemoteWriteBytes(), i*size)
		}
		idle()
	}
	if n := to.mr.RemoteWrites(); n < uint64(i) {
		t.Fatalf("write %d: RemoteWrites = %d with every byte counted", i, n)
	}
	if got := to.buf[size-1]; got != byte(i) {
		t.Fatalf("write %d: last byte %d", i, got)
	}
}

// TestDestroyAfterRemoteWrite: a responder that sees a peer's WRITE land
// and destroys its QP at once must still acknowledge the WRITE, or the
// peer retries into the void (ib_write_lat's last message does exactly
// this).
func TestDestroyAfterRemoteWrite(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			for i := range 20 {
				a, b := pairOn(t, lk.open, 4096, MTU1024)
				_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
				must(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err = b.mr.WaitRemoteWrites(ctx, 0)
				cancel()
				must(t, err)
				must(t, b.qp.Destroy())
				if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
					t.Fatalf("round %d: the WRITE the peer saw completed with %v", i, wc.Status)
				}
			}
		})
	}
}

// TestPingPongLoneSends: in ib_write_lat's exchange over UDP each side's
// WRITE leaves with the ACK of the peer's last one as one datagram of two
// segments, alone in its write: by sendto, with the port socket's
// UDP_SEGMENT option set once, on the second such datagram, and kept
// (setting it per message would cost a system call each).
func TestPingPongLoneSends(t *testing.T) {
	x, y := pairOn(t, newUDPDevices, 1<<16, MTU1024)
	const rounds = 300
	newPingPong(t, x, y).rounds(rounds)
	for _, d := range []*Device{x.dev, y.dev} {
		c := d.Counters()
		// The first datagram of two segments leaves by sendmmsg.
		if c["lone_sends"] < rounds-1 || c["segment_options"] != 1 {
			t.Errorf("%s after %d rounds: lone_sends %d, segment_options %d; want at least %d, 1",
				d.Name(), rounds, c["lone_sends"], c["segment_options"], rounds-1)
		}
	}
}

// TestModifyConnectsPort: moving an RC QP to RTR over UDP connects its
// source port's socket to the peer (link.CapConnectPort) before the QP
// sends anything, so that the first packets do not pay for the socket,
// connect(2) and the ID probes, and opens the link's flow socket for the
// connection, through which its packets then arrive; the QPs move data
// as before, a lone datagram by sendto.
func TestModifyConnectsPort(t *testing.T) {
	da, db := newUDPDevices(t)
	a, b := newEndpoint(t, da, 8192), newEndpoint(t, db, 8192)
	connect(t, a, b, MTU4096)
	for _, d := range []*Device{da, db} {
		if st := d.eng.Link().Stats(); st[stats.ConnectedPorts] != 1 || st[stats.LinkSentPkts] != 0 {
			t.Errorf("%s after modify_qp: ConnectedPorts %d, SentPackets %d; want 1, 0", d.Name(), st[stats.ConnectedPorts], st[stats.LinkSentPkts])
		}
	}
	fill(a.buf[:4096], 7)
	_, err := a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{a.mr.SGE(0, 4096)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("WRITE completion %+v", wc)
	}
	settle(db)
	if !bytes.Equal(b.buf[:4096], a.buf[:4096]) {
		t.Error("the WRITE's bytes differ at the target")
	}
	for _, d := range []*Device{da, db} {
		c := d.Counters()
		if c["connected_ports"] != 1 || c["unconnected_ports"] != 0 || c["ipv4_id_recoveries"] > 1 {
			t.Errorf("%s: connected_ports %d, unconnected_ports %d, ipv4_id_recoveries %d; want 1, 0, at most 1",
				d.Name(), c["connected_ports"], c["unconnected_ports"], c["ipv4_id_recoveries"])
		}
		// The WRITE's packets reached b, and the ACK a, on the flow socket.
		if c["flow_sockets"] != 1 || c["flow_datagrams"] == 0 || c["flow_datagrams"] > c["rcvd_pkts"] {
			t.Errorf("%s: flow_sockets %d, flow_datagrams %d (rcvd_pkts %d); want 1, the packets received",
				d.Name(), c["flow_sockets"], c["flow_datagrams"], c["rcvd_pkts"])
		}
	}
	// b's ACK, the one datagram of its write, left by sendto.
	if c := db.Counters(); c["lone_sends"] == 0 {
		t.Errorf("%s: lone_sends 0, want the ACK", db.Name())
	}
}
