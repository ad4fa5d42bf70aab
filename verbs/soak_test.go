package verbs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/transport"
)

// The soak test runs several QP pairs of mixed traffic — SEND, RDMA WRITE,
// RDMA READ, FETCH_ADD and CMP_SWAP of random sizes, seeded — over an
// in-memory link that loses, reorders, duplicates and corrupts packets.
// Afterwards every remote buffer must equal what was written, every
// fetch-and-add counter the number of adds, every WR must have completed
// exactly once and in order, and nothing may be left pending.

const (
	soakQPs    = 4
	soakRegion = 256 << 10 // each QP's WRITE/READ target region at the peer
)

// soakPair is one client QP and its server QP.
type soakPair struct {
	c, s   *endpoint
	region int // offset of this pair's region in the server's buffer
	shadow []byte
}

func TestSoak(t *testing.T) {
	profiles := []struct {
		name  string
		fault string
		ops   int
	}{
		{"none", "", 200},
		{"loss0.1%", "drop=0.1%", 400},
		{"loss1%", "drop=1%", 300},
		{"loss5%", "drop=5%", 150},
		{"reorder", "reorder=10%,window=8", 300},
		{"dup1%", "dup=1%", 300},
		{"corrupt0.1%", "corrupt=0.1%", 300},
		{"all", "drop=1%,reorder=5%,dup=1%,corrupt=0.1%", 200},
	}
	for i, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			spec := func(seed int) string { return strings.TrimPrefix(fmt.Sprintf("%s,seed=%d", p.fault, seed), ",") }
			fa, err := fault.Parse(spec(100 + i))
			must(t, err)
			fb, err := fault.Parse(spec(200 + i))
			must(t, err)
			soak(t, fa, fb, p.ops, uint64(i))
		})
	}
}

func soak(t *testing.T, fa, fb fault.Config, ops int, seed uint64) {
	a, b := netip.MustParseAddrPort("198.18.1.1:4791"), netip.MustParseAddrPort("198.18.1.2:4791")
	la, lb := faultyPair(t, a, b, fa, fb)
	dc, ds := openPair(t, Config{Addr: a.Addr(), Link: la, MTU: 9000}, Config{Addr: b.Addr(), Link: lb, MTU: 9000})
	server := newEndpoint(t, ds, soakQPs*soakRegion+soakQPs*8)
	var pairs []*soakPair
	for i := range soakQPs {
		c := newEndpoint(t, dc, 2*soakRegion)
		qp, err := server.pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: server.cq, RecvCQ: server.cq,
			Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		s := &endpoint{dev: ds, pd: server.pd, cq: server.cq, qp: qp, mr: server.mr, buf: server.buf}
		connectSoak(t, c, s)
		pairs = append(pairs, &soakPair{c: c, s: s, region: i * soakRegion, shadow: make([]byte, soakRegion)})
	}
	// The server side: keep receives posted; check each SEND's data.
	recvd := make([]int, soakQPs)
	var mu sync.Mutex
	stop := make(chan struct{})
	serverDone := make(chan error, 1)
	// Receive k of QP i lands in slot k % soakSlots of QP i's area: WQEs are
	// consumed in order, and a slot is posted again only after its check.
	const soakSlots, slotLen = 64, 20000
	rbuf := make([]byte, soakQPs*soakSlots*slotLen)
	rmr, err := server.pd.RegMR(rbuf, AccessLocalWrite)
	must(t, err)
	slot := func(i, k int) int { return (i*soakSlots + k%soakSlots) * slotLen }
	for i, p := range pairs {
		for k := range soakSlots {
			_, err := p.s.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{rmr.SGE(slot(i, k), slotLen)}}})
			must(t, err)
		}
	}
	go func() {
		wc := make([]WC, 16)
		for {
			select {
			case <-stop:
				serverDone <- nil
				return
			default:
			}
			n := server.cq.Poll(wc)
			if n == 0 {
				time.Sleep(20 * time.Microsecond)
				continue
			}
			for _, c := range wc[:n] {
				if c.Status != WCSuccess {
					serverDone <- fmt.Errorf("server WC %+v", c)
					return
				}
				if c.Opcode != WCRecv {
					continue
				}
				i := int(c.WRID)
				mu.Lock()
				k := recvd[i]
				recvd[i]++
				mu.Unlock()
				want := sendPayload(i, k, int(c.ByteLen))
				if !bytes.Equal(rbuf[slot(i, k):slot(i, k)+int(c.ByteLen)], want) {
					serverDone <- fmt.Errorf("QP %d SEND %d: data differs", i, k)
					return
				}
				if _, err := pairs[i].s.qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{rmr.SGE(slot(i, k), slotLen)}}}); err != nil {
					serverDone <- err
					return
				}
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, soakQPs)
	adds := make([]int, soakQPs)
	sends := make([]int, soakQPs)
	for i, p := range pairs {
		wg.Go(func() {
			n, s, err := p.run(i, server, ops, seed)
			adds[i], sends[i] = n, s
			if err != nil {
				errs <- fmt.Errorf("QP pair %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Wait for the server to have seen every SEND, then stop it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		all := true
		for i := range recvd {
			all = all && recvd[i] == sends[i]
		}
		mu.Unlock()
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	if err := <-serverDone; err != nil {
		t.Fatal(err)
	}
	settle(ds)
	for i, p := range pairs {
		if recvd[i] != sends[i] {
			t.Errorf("QP %d: server received %d SENDs, %d were sent", i, recvd[i], sends[i])
		}
		got := server.buf[p.region : p.region+soakRegion]
		if crc32.ChecksumIEEE(got) != crc32.ChecksumIEEE(p.shadow) {
			t.Errorf("QP %d: remote region checksum %08x, written %08x", i, crc32.ChecksumIEEE(got), crc32.ChecksumIEEE(p.shadow))
		}
		counter := binary.NativeEndian.Uint64(server.buf[soakQPs*soakRegion+8*i:])
		if counter != uint64(adds[i]) {
			t.Errorf("QP %d: counter %d after %d fetch-and-adds", i, counter, adds[i])
		}
		for _, qp := range []*QP{p.c.qp, p.s.qp} {
			settle(qp.dev)
			var sends, resps int
			qp.e.Call(func(t *transport.QP) { sends, resps = t.Outstanding() })
			if qp.State() != QPSRTS || sends != 0 || resps != 0 {
				t.Errorf("QP 0x%x: %v with %d WQEs and %d responses pending", qp.QPN(), qp.State(), sends, resps)
			}
		}
	}
	cc, cs := dc.Counters(), ds.Counters()
	t.Logf("client: sent %d pkts, %d retries, %d seq NAKs; server: %d duplicates, %d out of sequence, %d ICRC errors",
		cc["sent_pkts"], cc["completer_retry_err"], cc["rcvd_seq_err"], cs["duplicate_request"], cs["out_of_seq_request"], cs["icrc_errors"]+cc["icrc_errors"])
}

func connectSoak(t *testing.T, c, s *endpoint) {
	t.Helper()
	for _, x := range []struct{ e, peer *endpoint }{{c, s}, {s, c}} {
		qp := x.e.qp
		must(t, qp.Modify(&QPAttr{State: QPSInit, PortNum: 1,
			AccessFlags: AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic},
			AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
		ah := AHAttr{IsGlobal: true, DGID: GIDFromAddr(x.peer.dev.Addr().Addr())}
		must(t, qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024, DestQPN: x.peer.qp.QPN(), RQPSN: 0xfff000, AH: ah,
			MaxDestRdAtomic: 8, MinRNRTimer: 1},
			AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
		// Timeout 8: 1 ms, so losses recover fast; seven retries.
		must(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 0xfff000, Timeout: 12, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 8},
			AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic))
	}
}

// sendPayload is the content of the k-th SEND of QP i.
func sendPayload(i, k, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(i), uint64(k)))
	for j := range b {
		b[j] = byte(r.Uint32())
	}
	return b
}

// run posts ops random work requests, one batch at a time, checking each
// completion. It returns the number of FETCH_ADDs and SENDs.
func (p *soakPair) run(i int, server *endpoint, ops int, seed uint64) (adds, sends int, err error) {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	c := p.c
	counter := server.mr.Addr() + uint64(soakQPs*soakRegion+8*i)
	remote := server.mr.Addr() + uint64(p.region)
	local := c.buf[:soakRegion]
	readBack := c.buf[soakRegion:]
	wc := make([]WC, 16)
	next := uint64(0) // the WRID of the next completion expected
	for posted, round := 0, 0; posted < ops; round++ {
		// A retried READ reads memory again (IBA 9.7.5.1.6, as rxe does), so
		// a WRITE posted after it may show through: each batch reads the
		// half written by earlier batches and writes the other half.
		writeHalf := (round % 2) * soakRegion / 2
		readHalf := soakRegion/2 - writeHalf
		batch := min(1+rng.IntN(8), ops-posted)
		var wrs []SendWR
		type readCheck struct {
			wrid     uint64
			off, n   int
			expected []byte
		}
		var reads []readCheck
		var faddOld []struct {
			wrid uint64
			want uint64
			slot int
		}
		for j := range batch {
			wrid := uint64(posted + j)
			n := rng.IntN(20000)
			off := writeHalf + rng.IntN(soakRegion/2-n)
			switch op := rng.IntN(5); op {
			case 0: // SEND, from its own buffer: data is gathered when it goes out
				mr, err := c.pd.RegMR(sendPayload(i, sends, n), AccessLocalWrite)
				if err != nil {
					return adds, sends, err
				}
				wrs = append(wrs, SendWR{WRID: wrid, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, n)}})
				sends++
			case 1: // RDMA WRITE of fresh random bytes
				buf := make([]byte, n)
				for k := range buf {
					buf[k] = byte(rng.Uint32())
				}
				copy(p.shadow[off:], buf)
				mr, err := c.pd.RegMR(buf, AccessLocalWrite)
				if err != nil {
					return adds, sends, err
				}
				wrs = append(wrs, SendWR{WRID: wrid, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{mr.SGE(0, n)},
					RemoteAddr: remote + uint64(off), RKey: server.mr.RKey()})
			case 2: // RDMA READ: sees every WRITE of earlier batches
				off = readHalf + rng.IntN(soakRegion/2-n)
				slot := j * 20000
				reads = append(reads, readCheck{wrid, slot, n, append([]byte(nil), p.shadow[off:off+n]...)})
				wrs = append(wrs, SendWR{WRID: wrid, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{c.mr.SGE(soakRegion+slot, n)},
					RemoteAddr: remote + uint64(off), RKey: server.mr.RKey()})
			default: // FETCH_ADD of 1 on this QP's counter
				slot := j * 8
				faddOld = append(faddOld, struct {
					wrid uint64
					want uint64
					slot int
				}{wrid, uint64(adds), slot})
				wrs = append(wrs, SendWR{WRID: wrid, Opcode: WRAtomicFetchAndAdd, Flags: SendSignaled, SGL: []SGE{c.mr.SGE(slot, 8)},
					RemoteAddr: counter, RKey: server.mr.RKey(), CompareAdd: 1})
				adds++
			}
		}
		if _, err := c.qp.PostSend(wrs); err != nil {
			return adds, sends, err
		}
		posted += batch
		deadline := time.Now().Add(60 * time.Second)
		for next < uint64(posted) {
			n := c.cq.Poll(wc)
			if n == 0 {
				if time.Now().After(deadline) {
					return adds, sends, fmt.Errorf("WR %d never completed", next)
				}
				time.Sleep(20 * time.Microsecond)
				continue
			}
			for _, w := range wc[:n] {
				if w.Status != WCSuccess {
					return adds, sends, fmt.Errorf("WR %d: %v", w.WRID, w.Status)
				}
				if w.WRID != next {
					return adds, sends, fmt.Errorf("completion for WR %d, expected WR %d (exactly once, in order)", w.WRID, next)
				}
				next++
			}
		}
		for _, r := range reads {
			if !bytes.Equal(readBack[r.off:r.off+r.n], r.expected) {
				return adds, sends, fmt.Errorf("READ WR %d returned other bytes than were written", r.wrid)
			}
		}
		for _, f := range faddOld {
			if got := binary.NativeEndian.Uint64(local[f.slot:]); got != f.want {
				return adds, sends, fmt.Errorf("FETCH_ADD WR %d returned %d, want %d", f.wrid, got, f.want)
			}
		}
	}
	return adds, sends, nil
}

// TestFaultyUDP: two devices over real UDP sockets, each told to misbehave
// through Config.Fault, move 2 MiB each way by WRITE and READ intact; the
// receivers' ICRC errors equal exactly what the senders corrupted, so no
// corrupted packet was applied.
func TestFaultyUDP(t *testing.T) {
	n := udpHost.Add(2)
	ca := Config{Addr: netip.AddrFrom4([4]byte{127, 0, 1, byte(n - 1)}), Fault: "drop=1%,dup=1%,reorder=5%,corrupt=0.5%,seed=11"}
	cb := Config{Addr: netip.AddrFrom4([4]byte{127, 0, 1, byte(n)}), Fault: "drop=1%,dup=1%,reorder=5%,corrupt=0.5%,seed=12"}
	da, db := openPair(t, ca, cb)
	a, b := newEndpoint(t, da, 16<<20), newEndpoint(t, db, 16<<20)
	connect(t, a, b, MTU4096)
	drops0 := udpRcvbufErrors()
	const size = 2 << 20
	fill(a.buf[:size], 21)
	settle(b.dev)
	_, err := a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
		{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(size, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("WC %+v", wc)
	}
	settle(b.dev)
	if !bytes.Equal(b.buf[:size], a.buf[:size]) || !bytes.Equal(a.buf[size:2*size], a.buf[:size]) {
		t.Fatal("data differs after WRITE and READ over a faulty network")
	}
	// Let stray duplicates and delayed packets land: the counters settle
	// once nothing is in flight (a loaded machine takes a while).
	c1, c2 := da.Counters(), db.Counters()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		if c2["icrc_errors"] == c1["fault_corrupted"] && c1["icrc_errors"] == c2["fault_corrupted"] {
			break
		}
		time.Sleep(20 * time.Millisecond)
		c1, c2 = da.Counters(), db.Counters()
	}
	// Every corrupted packet the kernel delivered fails its ICRC check;
	// datagrams the kernel dropped for a full socket buffer (counted in
	// /proc/net/snmp, this namespace's) never reach the check.
	kernelDrops := udpRcvbufErrors() - drops0
	if c1["fault_corrupted"] == 0 || c1["fault_dropped"] == 0 || c2["fault_corrupted"] == 0 {
		t.Errorf("faults did not happen: %v / %v", c1, c2)
	}
	for _, d := range [][2]uint64{{c2["icrc_errors"], c1["fault_corrupted"]}, {c1["icrc_errors"], c2["fault_corrupted"]}} {
		if d[0] > d[1] || d[1]-d[0] > kernelDrops {
			t.Errorf("ICRC errors %d/%d, corrupted %d/%d, datagrams the kernel dropped %d",
				c2["icrc_errors"], c1["icrc_errors"], c1["fault_corrupted"], c2["fault_corrupted"], kernelDrops)
		}
	}
	// Both directions' counts, so that a run where the two disagree shows
	// where the difference went.
	for _, d := range []struct {
		name   string
		tx, rx map[string]uint64
	}{{"a to b", c1, c2}, {"b to a", c2, c1}} {
		t.Logf("%s: %d sent, %d dropped, %d corrupted, %d reordered, %d overflow, %d discarded, %d retries, %d send errors; received: %d duplicates, %d ICRC errors, %d malformed",
			d.name, d.tx["sent_pkts"], d.tx["fault_dropped"], d.tx["fault_corrupted"], d.tx["fault_reordered"], d.tx["fault_overflow"], d.tx["fault_discarded"],
			d.tx["completer_retry_err"], d.tx["send_err"], d.rx["duplicate_request"], d.rx["icrc_errors"], d.rx["malformed"])
	}
	if _, err := Open(Config{Addr: netip.MustParseAddr("127.0.1.250"), Fault: "drop=200%"}); err == nil {
		t.Error("a bad fault spec was accepted")
	}
}

// udpRcvbufErrors returns the network namespace's count of UDP datagrams
// dropped for a full receive buffer (RcvbufErrors in /proc/net/snmp).
func udpRcvbufErrors() uint64 {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return 0
	}
	var names []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, n := range names {
			if n == "RcvbufErrors" && i < len(f) {
				v, _ := strconv.ParseUint(f[i], 10, 64)
				return v
			}
		}
	}
	return 0
}
