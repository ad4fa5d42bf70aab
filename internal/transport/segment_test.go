package transport

import (
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// TestPackets: a message takes a packet per MTU or part of one, and an
// empty message one packet.
func TestPackets(t *testing.T) {
	tests := []struct {
		n    uint64
		mtu  int
		want int
	}{
		{0, 1024, 1}, {1, 1024, 1}, {1024, 1024, 1}, {1025, 1024, 2},
		{5000, 1024, 5}, {65536, 4096, 16}, {MaxMessageSize, 256, MaxMessageSize / 256},
	}
	for _, tc := range tests {
		if got := packets(tc.n, tc.mtu); got != tc.want {
			t.Errorf("packets(%d, %d) = %d, want %d", tc.n, tc.mtu, got, tc.want)
		}
	}
}

// TestSendOpcode: the opcode of each SEND and RDMA WRITE packet at each
// position in its message, with and without immediate data or
// invalidation (IBA 9.2.1).
func TestSendOpcode(t *testing.T) {
	tests := []struct {
		op                         WROpcode
		first, middle, last, alone string
	}{
		{WRSend, "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_ONLY"},
		{WRSendWithImm, "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY_WITH_IMMEDIATE"},
		{WRSendWithInv, "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE"},
		{WRRDMAWrite, "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST", "RDMA_WRITE_ONLY"},
		{WRRDMAWriteWithImm, "RDMA_WRITE_FIRST", "RDMA_WRITE_MIDDLE", "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
	}
	for _, tc := range tests {
		w := &sendWQE{wr: SendWR{Opcode: tc.op}}
		for _, pos := range []struct {
			first, last bool
			want        string
		}{{true, false, tc.first}, {false, false, tc.middle}, {false, true, tc.last}, {true, true, tc.alone}} {
			if got := wire.Opcode(sendOpcode(w, pos.first, pos.last)).Info().Name; got != pos.want {
				t.Errorf("%v, first %v, last %v: %s, want %s", tc.op, pos.first, pos.last, got, pos.want)
			}
		}
	}
}

// TestReadResponseOpcode: a READ response packet's opcode by its position.
func TestReadResponseOpcode(t *testing.T) {
	for _, tc := range []struct {
		first, last bool
		want        string
	}{
		{true, false, "RDMA_READ_RESPONSE_FIRST"}, {false, false, "RDMA_READ_RESPONSE_MIDDLE"},
		{false, true, "RDMA_READ_RESPONSE_LAST"}, {true, true, "RDMA_READ_RESPONSE_ONLY"},
	} {
		if got := wire.Opcode(readResponseOps[position(tc.first, tc.last)]).Info().Name; got != tc.want {
			t.Errorf("first %v, last %v: %s, want %s", tc.first, tc.last, got, tc.want)
		}
	}
}
