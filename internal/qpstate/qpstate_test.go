package qpstate

import "testing"

// The numeric values are ABI: the verbs package passes them through as
// enum ibv_qp_state, enum ibv_qp_type and enum ibv_qp_attr_mask
// (rdma-core libibverbs/verbs.h).
func TestValues(t *testing.T) {
	states := []struct {
		s    State
		want uint8
	}{
		{Reset, 0}, {Init, 1}, {RTR, 2}, {RTS, 3}, {SQD, 4}, {SQE, 5}, {Err, 6}, {Unknown, 7},
	}
	for _, tt := range states {
		if uint8(tt.s) != tt.want {
			t.Errorf("%v = %d, want %d", tt.s, uint8(tt.s), tt.want)
		}
	}
	types := []struct {
		t    Type
		want uint8
	}{
		{RC, 2}, {UC, 3}, {UD, 4},
	}
	for _, tt := range types {
		if uint8(tt.t) != tt.want {
			t.Errorf("%v = %d, want %d", tt.t, uint8(tt.t), tt.want)
		}
	}
	masks := []struct {
		m    AttrMask
		want uint32
	}{
		{AttrState, 0x1},
		{AttrCurState, 0x2},
		{AttrEnSQDAsyncNotify, 0x4},
		{AttrAccessFlags, 0x8},
		{AttrPKeyIndex, 0x10},
		{AttrPort, 0x20},
		{AttrQKey, 0x40},
		{AttrAV, 0x80},
		{AttrPathMTU, 0x100},
		{AttrTimeout, 0x200},
		{AttrRetryCnt, 0x400},
		{AttrRNRRetry, 0x800},
		{AttrRQPSN, 0x1000},
		{AttrMaxQPRdAtomic, 0x2000},
		{AttrAltPath, 0x4000},
		{AttrMinRNRTimer, 0x8000},
		{AttrSQPSN, 0x10000},
		{AttrMaxDestRdAtomic, 0x20000},
		{AttrPathMigState, 0x40000},
		{AttrCap, 0x80000},
		{AttrDestQPN, 0x100000},
		{AttrRateLimit, 0x2000000},
	}
	for _, tt := range masks {
		if uint32(tt.m) != tt.want {
			t.Errorf("%v = %#x, want %#x", tt.m, uint32(tt.m), tt.want)
		}
	}
}

func TestStateString(t *testing.T) {
	tests := []struct {
		s    State
		want string
	}{
		{Reset, "RESET"},
		{Init, "INIT"},
		{RTR, "RTR"},
		{RTS, "RTS"},
		{SQD, "SQD"},
		{SQE, "SQE"},
		{Err, "ERR"},
		{Unknown, "UNKNOWN"},
		{State(8), "State(8)"},
		{State(255), "State(255)"},
	}
	for _, tt := range tests {
		if got := tt.s.String(); got != tt.want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(tt.s), got, tt.want)
		}
	}
}

func TestTypeString(t *testing.T) {
	tests := []struct {
		t    Type
		want string
	}{
		{RC, "RC"},
		{UC, "UC"},
		{UD, "UD"},
		{Type(0), "Type(0)"},
		{Type(8), "Type(8)"}, // IBV_QPT_RAW_PACKET
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("Type(%d).String() = %q, want %q", uint8(tt.t), got, tt.want)
		}
	}
}

func TestAttrMaskString(t *testing.T) {
	tests := []struct {
		m    AttrMask
		want string
	}{
		{0, "0"},
		{AttrState, "STATE"},
		{AttrState | AttrPathMTU | AttrDestQPN, "STATE|PATH_MTU|DEST_QPN"},
		{AttrDestQPN | AttrPathMTU | AttrState, "STATE|PATH_MTU|DEST_QPN"}, // lowest bit first
		{AttrRateLimit, "RATE_LIMIT"},
		{1 << 21, "0x200000"},
		{AttrState | 1<<21 | 1<<30, "STATE|0x40200000"},
		{AttrCap | AttrDestQPN | 1<<24 | AttrRateLimit, "CAP|DEST_QPN|RATE_LIMIT|0x1000000"},
		{
			1<<21 - 1,
			"STATE|CUR_STATE|EN_SQD_ASYNC_NOTIFY|ACCESS_FLAGS|PKEY_INDEX|PORT|QKEY|AV|" +
				"PATH_MTU|TIMEOUT|RETRY_CNT|RNR_RETRY|RQ_PSN|MAX_QP_RD_ATOMIC|ALT_PATH|" +
				"MIN_RNR_TIMER|SQ_PSN|MAX_DEST_RD_ATOMIC|PATH_MIG_STATE|CAP|DEST_QPN",
		},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("AttrMask(%#x).String() = %q, want %q", uint32(tt.m), got, tt.want)
		}
	}
}

func TestNext(t *testing.T) {
	tests := []struct {
		cur       State
		mask      AttrMask
		requested State
		want      State
	}{
		{Reset, AttrState | AttrPort, Init, Init},
		{RTS, AttrAltPath, Reset, RTS}, // no STATE: requested is ignored
		{RTS, 0, Err, RTS},
		{RTS, AttrState, RTS, RTS},
	}
	for _, tt := range tests {
		if got := Next(tt.cur, tt.mask, tt.requested); got != tt.want {
			t.Errorf("Next(%v, %v, %v) = %v, want %v", tt.cur, tt.mask, tt.requested, got, tt.want)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	b.ReportAllocs()
	mask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN |
		AttrMaxDestRdAtomic | AttrMinRNRTimer
	for b.Loop() {
		if err := Check(RC, Init, RTR, mask); err != nil {
			b.Fatal(err)
		}
	}
}
