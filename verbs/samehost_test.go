//go:build linux

package verbs

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/shm"
	"github.com/goroce/goroce/internal/link/udp"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// damagingLink is a same-host link that changes one byte of the next lent
// packet a test picks, in the ring, as a peer process writing a wrong
// packet would: the link leaves such packets' ICRC to the device
// (link.CapDeferICRC), so the device must find the damage itself.
type damagingLink struct {
	*shm.Mux

	mu      sync.Mutex
	pick    func(wire.BTH) bool // the packet to damage; nil once done
	offset  int                 // which byte of it
	pending bool                // the damaged packet's ICRC was left to the device
}

func (l *damagingLink) ReadLent(pkts []link.Packet, wait bool) (int, error) {
	n, err := l.Mux.ReadLent(pkts, wait)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range pkts[:n] {
		p := &pkts[i]
		if l.pick == nil || p.Lent == nil || !l.pick(wire.BTH(p.Lent)) {
			continue
		}
		p.Lent[l.offset] ^= 0x20
		l.pick, l.pending = nil, p.ICRCPending
		if p.ICRCPending {
			// The seed the link would have computed had the damage
			// been in the ring when it read the slot: it covers the
			// BTH.
			f := wire.IPFields{Src: p.Peer.Addr(), Dst: l.LocalAddr().Addr(),
				SrcPort: p.Peer.Port(), DstPort: l.LocalAddr().Port(), FlagsFrag: wire.DF}
			p.ICRCSeed = f.HeaderCRC(p.Lent[:len(p.Lent)-wire.ICRCLen])
		}
	}
	return n, err
}

// arm makes l damage the next packet pick accepts, at offset.
func (l *damagingLink) arm(pick func(wire.BTH) bool, offset int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pick, l.offset, l.pending = pick, offset, false
}

// damaged reports whether l damaged a packet, and whether that packet
// came with its ICRC check left to the device.
func (l *damagingLink) damaged() (done, pending bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pick == nil, l.pending
}

// TestSameHostDamagedPacket: on the same-host path the device checks the
// ICRC of a ring packet itself, for a WRITE in the pass that places its
// payload. A damaged packet, wherever the damage is, is dropped with no
// effect and counted in icrc_errors (not malformed, even when the damage
// names a QP that does not exist), and the requester's retry delivers the
// message intact (IBA 9.7.5.1.1: the responder silently drops a packet
// with a bad ICRC).
func TestSameHostDamagedPacket(t *testing.T) {
	addrA, addrB := sameHostAddrs()
	ub, err := udp.Listen(udp.Config{Addr: netip.AddrPortFrom(addrB, defaultUDPPort)})
	must(t, err)
	lb, err := shm.New(ub, shm.Config{Dir: stats.Dir(), DeferICRC: true})
	if err != nil {
		ub.Close()
		t.Fatal(err)
	}
	dl := &damagingLink{Mux: lb}
	da, db := openPair(t, Config{Addr: addrA, SameHost: true}, Config{Addr: addrB, Link: dl})
	a, b := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
	connect(t, a, b, MTU1024)

	for _, tc := range []struct {
		name   string
		send   bool // a SEND into a posted receive, else a WRITE
		size   int
		pick   func(wire.BTH) bool
		offset int // the byte damaged, from the BTH
	}{
		// The middle of a 4-packet WRITE: its payload is checked while
		// it is placed; the LAST that follows is out of sequence, and
		// the NAK brings the retry.
		{"write payload", false, 4096, isOp(wire.OpWriteMiddle), wire.BTHLen + 100},
		// A single-packet WRITE, damaged in the payload and then in
		// the R_Key: only the retransmit timer recovers these.
		{"write only payload", false, 512, isOp(wire.OpWriteOnly), wire.BTHLen + wire.RETHLen + 100},
		{"write only rkey", false, 512, isOp(wire.OpWriteOnly), wire.BTHLen + 8},
		// The PSN, covered by the link's part of the check (its seed):
		// the transport must check before it acts on the PSN.
		{"write psn", false, 4096, isOp(wire.OpWriteMiddle), 11},
		// The destination QP: the router finds no such QP and must
		// count a damaged packet, not a malformed one.
		{"dest qp", false, 512, isOp(wire.OpWriteOnly), 6},
		// A SEND's ICRC is checked before it has any effect: the
		// receive it would have consumed takes the retry.
		{"send payload", true, 3000, isOp(wire.OpSendMiddle), wire.BTHLen + 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := db.Counters()
			fill(a.buf[:tc.size], uint64(tc.size)+uint64(len(tc.name)))
			clear(b.buf[:tc.size])
			dl.arm(tc.pick, tc.offset)
			wr := SendWR{WRID: 7, Opcode: WRRDMAWrite, Flags: SendSignaled,
				SGL: []SGE{a.mr.SGE(0, tc.size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			if tc.send {
				wr.Opcode, wr.RemoteAddr, wr.RKey = WRSend, 0, 0
				_, err := b.qp.PostRecv([]RecvWR{{WRID: 8, SGL: []SGE{b.mr.SGE(0, tc.size)}}})
				must(t, err)
			}
			_, err := a.qp.PostSend([]SendWR{wr})
			must(t, err)
			if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
				t.Fatalf("a message with a damaged packet on the way: %+v", wc)
			}
			if tc.send {
				if wc := wait(t, b.cq, 1)[0]; wc.Status != WCSuccess || wc.WRID != 8 || wc.ByteLen != uint32(tc.size) {
					t.Fatalf("the receive: %+v", wc)
				}
				if n := b.cq.Poll(make([]WC, 1)); n != 0 {
					t.Fatal("a second receive completion")
				}
			}
			settle(db)
			// The link must have left the check to the device, or the
			// test would only show the link's own check.
			if done, pending := dl.damaged(); !done || !pending {
				t.Fatalf("damaged %v, its ICRC left to the device %v; want both", done, pending)
			}
			if !bytes.Equal(b.buf[:tc.size], a.buf[:tc.size]) {
				t.Error("the data did not arrive intact")
			}
			after := db.Counters()
			if d := after["icrc_errors"] - before["icrc_errors"]; d != 1 {
				t.Errorf("icrc_errors +%d, want +1", d)
			}
			if d := after["malformed"] - before["malformed"]; d != 0 {
				t.Errorf("malformed +%d, want 0", d)
			}
		})
	}
}

func isOp(op wire.Opcode) func(wire.BTH) bool {
	return func(h wire.BTH) bool { return h.Opcode() == op }
}
