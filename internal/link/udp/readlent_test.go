//go:build linux

package udp

import (
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
)

// TestReadLent: a UDP link with GRO lends the packets of a super-packet
// without copying them into the caller's buffers, each checked; while they
// are lent, other reads find nothing; after ReturnLent the link reads on.
func TestReadLent(t *testing.T) {
	a, b := udpPair(t, "127.0.0.1", "127.0.0.2")
	if b.rd.gro == nil {
		t.Skip("no UDP_GRO")
	}
	if b.Caps()&link.CapLend == 0 {
		t.Fatal("a GRO link does not declare link.CapLend")
	}
	var ln link.Link = b
	sent := make([]link.Packet, 16) // one run of equal sizes: a super-packet
	for i := range sent {
		sent[i] = link.Packet{Buf: linktest.BuildPacket(make([]byte, link.MaxPacket), 0x11, uint32(i), 1024, byte(i)), Peer: b.LocalAddr()}
	}
	if n, err := a.WriteBatch(sent); n != len(sent) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	bufs := linktest.ReadBufs(4) // fewer than were sent: the rest waits in the link
	var got []link.Packet
	for len(got) < len(sent) {
		n, err := ln.ReadLent(bufs, true)
		if err != nil || n == 0 {
			t.Fatalf("ReadLent = %d, %v", n, err)
		}
		for _, p := range bufs[:n] {
			if p.Lent == nil {
				t.Fatal("a GRO link copied instead of lending")
			}
			if len(p.Buf) != 0 {
				t.Fatalf("ReadLent wrote %d bytes into the caller's buffer", len(p.Buf))
			}
			got = append(got, link.Packet{Buf: append([]byte(nil), p.Lent...), Peer: p.Peer})
		}
		if k, err := b.PollBatch(linktest.ReadBufs(1)); k != 0 || err != nil {
			t.Fatalf("PollBatch during a loan = %d, %v", k, err)
		}
		ln.ReturnLent()
	}
	checkReceived(t, got, sent, a.LocalAddr(), b.LocalAddr())
}
