package verbs_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Example moves data between two devices over UDP on two loopback
// addresses, as two processes on one host would: an RDMA WRITE into the
// server's memory, then a SEND the server receives.
func Example() {
	server := open("127.0.2.1")
	client := open("127.0.2.2")
	defer server.dev.Close()
	defer client.dev.Close()

	// Exchange QP numbers, GIDs and the server's buffer address and key out
	// of band (perftest uses TCP; here they are at hand), then connect.
	client.connect(server)
	server.connect(client)

	// The server posts a receive, the client writes and then sends.
	post(server.qp.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{server.mr.SGE(1024, 64)}}}))
	copy(client.buf, "written by RDMA WRITE")
	copy(client.buf[100:], "sent by SEND")
	post(client.qp.PostSend([]verbs.SendWR{
		{WRID: 10, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{client.mr.SGE(0, 21)},
			RemoteAddr: server.mr.Addr(), RKey: server.mr.RKey()},
		{WRID: 11, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{client.mr.SGE(100, 12)}},
	}))

	wc := server.waitOne()
	fmt.Println(wc.Opcode, wc.Status, wc.ByteLen)
	// The receive completion orders the WRITE's data before this read.
	fmt.Printf("%s / %s\n", server.buf[:21], server.buf[1024:1024+wc.ByteLen])
	wc = client.waitOne()
	fmt.Println(wc.Opcode, wc.Status, wc.WRID)
	// Output:
	// RECV SUCCESS 12
	// written by RDMA WRITE / sent by SEND
	// SEND SUCCESS 11
}

type node struct {
	dev *verbs.Device
	cq  *verbs.CQ
	qp  *verbs.QP
	mr  *verbs.MR
	buf []byte
}

func open(addr string) *node {
	return openConfig(verbs.Config{Addr: netip.MustParseAddr(addr)})
}

func openConfig(cfg verbs.Config) *node {
	dev, err := verbs.Open(cfg)
	check(err)
	pd, err := dev.AllocPD()
	check(err)
	n := &node{dev: dev, buf: make([]byte, 4096)}
	n.mr, err = pd.RegMR(n.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	check(err)
	n.cq, err = dev.CreateCQ(16, nil)
	check(err)
	n.qp, err = pd.CreateQP(verbs.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err)
	return n
}

// connect takes the QP through INIT, RTR and RTS towards peer.
func (n *node) connect(peer *node) {
	check(n.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	check(n.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: peer.qp.QPN(), RQPSN: 0,
		AH:              verbs.AHAttr{IsGlobal: true, DGID: verbs.GIDFromAddr(peer.dev.Addr().Addr()), SGIDIndex: uint8(n.dev.GIDIndex())},
		MaxDestRdAtomic: 1, MinRNRTimer: 12},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	check(n.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

func (n *node) waitOne() verbs.WC {
	wc := make([]verbs.WC, 1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if n.cq.Poll(wc) == 1 {
			return wc[0]
		}
		time.Sleep(10 * time.Microsecond)
	}
	log.Fatal("no completion")
	return verbs.WC{}
}

func post(_ int, err error) { check(err) }

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// ExampleDevice_BusyPoll runs a ping-pong of RDMA WRITEs in which each side
// waits for the other's WRITE by busy-polling its device: the WRITE is
// read from the socket and placed into memory on the waiting goroutine
// itself, with no goroutine wake-up, which is what a latency-sensitive
// program wants (at the price of a busy CPU while it waits).
func ExampleDevice_BusyPoll() {
	a := open("127.0.2.3")
	b := open("127.0.2.4")
	defer a.dev.Close()
	defer b.dev.Close()
	a.connect(b)
	b.connect(a)

	// ping writes one byte into peer's buffer, and peer waits for it.
	ping := func(from, to *node, i int) {
		from.buf[0] = byte(i)
		post(from.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{from.mr.SGE(0, 1)},
			RemoteAddr: to.mr.Addr() + 512, RKey: to.mr.RKey()}}))
		landed := func() bool { return to.mr.RemoteWrites() == uint64(i) }
		for !to.dev.BusyPoll(200*time.Microsecond, landed) {
			// Nothing within the spin: block until the write lands.
			_, err := to.mr.WaitRemoteWrites(context.Background(), uint64(i-1))
			check(err)
		}
	}
	for i := 1; i <= 1000; i++ {
		ping(a, b, i)
		ping(b, a, i)
	}
	fmt.Println(a.buf[512], b.buf[512], a.mr.RemoteWrites(), b.mr.RemoteWrites())
	// Output: 232 232 1000 1000
}

// ExampleConfig_sameHost opens two devices with the same-host path: they
// exchange the same RoCEv2 packets as over UDP, through shared memory
// instead of the kernel, as the counters show. Devices in two processes of
// one user do the same (GOROCE_SAMEHOST=1 turns it on for the perftest
// tools).
func ExampleConfig_sameHost() {
	a := openConfig(verbs.Config{Addr: netip.MustParseAddr("127.0.2.5"), SameHost: true})
	b := openConfig(verbs.Config{Addr: netip.MustParseAddr("127.0.2.6"), SameHost: true})
	defer a.dev.Close()
	defer b.dev.Close()
	a.connect(b)
	b.connect(a)

	copy(a.buf, "hello")
	post(a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 5)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}}))
	wc := a.waitOne()
	c := a.dev.Counters()
	fmt.Println(wc.Status, string(b.buf[100:105]), c["samehost_pkts"] == c["sent_pkts"])
	// Output: SUCCESS hello true
}

// ExampleConfig_netNS opens two devices of one process in two network
// namespaces, here "left" and "right" made beforehand with "ip netns add"
// and joined by a veth pair holding 198.18.9.1 and 198.18.9.2 (as root:
// entering a namespace needs CAP_SYS_ADMIN). Their sockets live there, so
// their packets cross the veth, and they connect as any two devices do.
// goroce bench -veth makes such a pair for a run.
func ExampleConfig_netNS() {
	a := openConfig(verbs.Config{Addr: netip.MustParseAddr("198.18.9.1"), NetNS: "/run/netns/left"})
	b := openConfig(verbs.Config{Addr: netip.MustParseAddr("198.18.9.2"), NetNS: "/run/netns/right"})
	defer a.dev.Close()
	defer b.dev.Close()
	a.connect(b)
	b.connect(a)

	copy(a.buf, "across")
	post(a.qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{a.mr.SGE(0, 6)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}))
	fmt.Println(a.waitOne().Status, string(b.buf[:6]))
}
