package memory

import (
	"errors"
	"testing"
)

func TestAccessString(t *testing.T) {
	tests := []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{AccessLocalWrite, "LOCAL_WRITE"},
		{AccessLocalWrite | AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{AccessRemoteAtomic | AccessRemoteWrite | AccessLocalWrite, "LOCAL_WRITE|REMOTE_WRITE|REMOTE_ATOMIC"},
		{AccessMWBind | AccessZeroBased | AccessOnDemand | AccessHugeTLB, "MW_BIND|ZERO_BASED|ON_DEMAND|HUGETLB"},
		{AccessFlushGlobal | AccessFlushPersistent | AccessRelaxedOrdering, "FLUSH_GLOBAL|FLUSH_PERSISTENT|RELAXED_ORDERING"},
		{1 << 10, "0x400"},
		{AccessRemoteRead | 1<<31 | 1<<12, "REMOTE_READ|0x80001000"},
	}
	for _, tt := range tests {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tt.a), got, tt.want)
		}
	}
}

// TestAccessValues pins the flags to ibv_access_flags.
func TestAccessValues(t *testing.T) {
	tests := []struct {
		a    Access
		want uint32
	}{
		{AccessLocalWrite, 1}, {AccessRemoteWrite, 2}, {AccessRemoteRead, 4},
		{AccessRemoteAtomic, 8}, {AccessMWBind, 16}, {AccessZeroBased, 32},
		{AccessOnDemand, 64}, {AccessHugeTLB, 128}, {AccessFlushGlobal, 256},
		{AccessFlushPersistent, 512}, {AccessRelaxedOrdering, 1 << 20},
	}
	for _, tt := range tests {
		if uint32(tt.a) != tt.want {
			t.Errorf("%v = %#x, want %#x", tt.a, uint32(tt.a), tt.want)
		}
	}
}

func TestRegisterAccessRules(t *testing.T) {
	tests := []struct {
		a    Access
		want error
	}{
		{0, nil},
		{AccessRemoteRead, nil},
		{AccessLocalWrite, nil},
		{AccessLocalWrite | AccessRemoteWrite, nil},
		{AccessLocalWrite | AccessRemoteAtomic, nil},
		{AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind |
			AccessZeroBased | AccessOnDemand | AccessHugeTLB | AccessFlushGlobal | AccessFlushPersistent |
			AccessRelaxedOrdering, nil},
		{AccessRemoteWrite, ErrInvalidAccess},                    // IBA 10.6, ibv_reg_mr(3)
		{AccessRemoteAtomic, ErrInvalidAccess},                   // likewise
		{AccessRemoteRead | AccessRemoteWrite, ErrInvalidAccess}, // likewise
		{1 << 10, ErrInvalidAccess},                              // undefined
		{AccessLocalWrite | 1<<21, ErrInvalidAccess},             // undefined optional bit
	}
	for _, tt := range tests {
		t.Run(tt.a.String(), func(t *testing.T) {
			tab := NewTable(0)
			r, err := tab.Register(1, make([]byte, 8), tt.a)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Register(%v) error = %v, want %v", tt.a, err, tt.want)
			}
			if err != nil {
				if r != nil || tab.Len() != 0 {
					t.Errorf("failed Register returned %v and left %d regions", r, tab.Len())
				}
				return
			}
			if r.Access() != tt.a {
				t.Errorf("Access() = %v, want %v", r.Access(), tt.a)
			}
		})
	}
}
