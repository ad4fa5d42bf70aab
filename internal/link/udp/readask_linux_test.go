//go:build linux

package udp

import (
	"testing"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/wire"
)

// TestReadAsk: a poll asks for one datagram after a lone request found
// after an empty read, and for all after anything else: a stream (two
// reads in a row that found one each), an ACK, a large datagram, two
// datagrams.
func TestReadAsk(t *testing.T) {
	const max = 32
	req := func(n int) []byte {
		b := make([]byte, n)
		b[0] = wire.OpWriteOnly
		return b
	}
	ack := []byte{wire.OpAcknowledge, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	atomicAck := append([]byte{wire.OpAtomicAcknowledge}, make([]byte, 27)...)
	type read struct {
		k     int
		first []byte
	}
	for _, tc := range []struct {
		name  string
		reads []read
		want  int // what the read after them asks for
	}{
		{"at first", nil, max},
		{"lone request", []read{{0, nil}, {1, req(56)}}, 1},
		{"lone request, empty reads after", []read{{0, nil}, {1, req(56)}, {0, nil}, {0, nil}}, 1},
		{"ping-pong", []read{{0, nil}, {1, req(56)}, {0, nil}, {1, req(56)}, {0, nil}, {1, req(36)}}, 1},
		{"lone request at the start", []read{{1, req(56)}}, 1},
		{"stream: two lone requests in a row", []read{{0, nil}, {1, req(56)}, {1, req(56)}}, max},
		{"a lone request found by a read of all", []read{{0, nil}, {1, req(56)}, {1, req(56)}, {1, req(56)}}, 1},
		{"largest lone request", []read{{0, nil}, {1, req(loneBytes)}}, 1},
		{"too large to be lone", []read{{0, nil}, {1, req(loneBytes + 1)}}, max},
		{"ACK", []read{{0, nil}, {1, ack}}, max},
		{"atomic ACK", []read{{0, nil}, {1, atomicAck}}, max},
		{"ACK after a lone request", []read{{0, nil}, {1, req(56)}, {0, nil}, {1, ack}}, max},
		{"two datagrams", []read{{0, nil}, {2, req(56)}}, max},
		{"two after a stream", []read{{0, nil}, {1, req(56)}, {1, req(56)}, {2, req(56)}}, max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a readAsk
			for i, r := range tc.reads {
				asked := a.next(max)
				if r.k > asked {
					t.Fatalf("read %d asked for %d, the test has it find %d", i, asked, r.k)
				}
				a.got(asked, r.k, r.first)
			}
			if got := a.next(max); got != tc.want {
				t.Errorf("next read asks for %d, want %d", got, tc.want)
			}
		})
	}
}

// TestPollAsksOne: over a UDP link, a poll after a lone request asks the
// socket for one datagram, and when more arrive than it asks for, none is
// lost and they come in order. (When the asks grow again is TestReadAsk's:
// here it would depend on when the kernel queues each datagram.)
func TestPollAsksOne(t *testing.T) {
	for _, cfg := range []Config{{}, {NoGSO: true}} {
		a, b := udpPairConfig(t, "127.0.0.1", "127.0.0.2", cfg)
		name := "GRO"
		if b.rd.gro == nil {
			name = "no GRO"
		}
		t.Run(name, func(t *testing.T) {
			bufs := linktest.ReadBufs(link.MaxBatch)
			poll := func() int {
				t.Helper()
				n, err := b.PollBatch(bufs)
				if err != nil {
					t.Fatal(err)
				}
				for i := range bufs {
					bufs[i].Buf = bufs[i].Buf[:cap(bufs[i].Buf)]
				}
				return n
			}
			asks := func() int {
				b.rd.Lock()
				defer b.rd.Unlock()
				return b.rd.ask.next(link.MaxBatch)
			}
			send := func(pkts []link.Packet) {
				t.Helper()
				if n, err := a.WriteBatch(pkts); n != len(pkts) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
			}
			if n := poll(); n != 0 {
				t.Fatalf("a poll of an empty link found %d packets", n)
			}
			one := linktest.Batch(3, b.LocalAddr())[1:2] // a SEND of one byte
			send(one)
			checkReceived(t, linktest.PollN(t, b, bufs, 1), one, a.LocalAddr(), b.LocalAddr())
			if got := asks(); got != 1 {
				t.Fatalf("after a lone request the next poll asks for %d datagrams, want 1", got)
			}
			// Five datagrams, each sent on its own, queue up behind the
			// poll that asks for one.
			sent := linktest.Batch(5, b.LocalAddr())
			for i := range sent {
				send(sent[i : i+1])
			}
			checkReceived(t, linktest.PollN(t, b, bufs, len(sent)), sent, a.LocalAddr(), b.LocalAddr())
		})
	}
}
