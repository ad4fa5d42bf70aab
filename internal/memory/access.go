package memory

import (
	"fmt"
	"strings"
)

// Access is a set of memory access rights, with the values of
// ibv_access_flags. Local read access is always granted and has no flag.
type Access uint32

// Access flags, as ibv_access_flags in rdma-core's verbs.h.
const (
	AccessLocalWrite      Access = 1 << 0
	AccessRemoteWrite     Access = 1 << 1
	AccessRemoteRead      Access = 1 << 2
	AccessRemoteAtomic    Access = 1 << 3
	AccessMWBind          Access = 1 << 4
	AccessZeroBased       Access = 1 << 5 // remote and local addresses are offsets into the region: Addr is 0
	AccessOnDemand        Access = 1 << 6 // accepted; registered Go memory is always resident
	AccessHugeTLB         Access = 1 << 7 // accepted; a hint with no effect here
	AccessFlushGlobal     Access = 1 << 8
	AccessFlushPersistent Access = 1 << 9
	AccessRelaxedOrdering Access = 1 << 20 // accepted; a hint with no effect here
)

// accessNames are the flag names, in bit order, as ibv_access_flags without
// the IBV_ACCESS_ prefix.
var accessNames = [...]struct {
	a    Access
	name string
}{
	{AccessLocalWrite, "LOCAL_WRITE"},
	{AccessRemoteWrite, "REMOTE_WRITE"},
	{AccessRemoteRead, "REMOTE_READ"},
	{AccessRemoteAtomic, "REMOTE_ATOMIC"},
	{AccessMWBind, "MW_BIND"},
	{AccessZeroBased, "ZERO_BASED"},
	{AccessOnDemand, "ON_DEMAND"},
	{AccessHugeTLB, "HUGETLB"},
	{AccessFlushGlobal, "FLUSH_GLOBAL"},
	{AccessFlushPersistent, "FLUSH_PERSISTENT"},
	{AccessRelaxedOrdering, "RELAXED_ORDERING"},
}

// accessKnown is the union of the defined flags.
const accessKnown = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead |
	AccessRemoteAtomic | AccessMWBind | AccessZeroBased | AccessOnDemand |
	AccessHugeTLB | AccessFlushGlobal | AccessFlushPersistent | AccessRelaxedOrdering

// String returns the flag names joined by "|", for example
// "LOCAL_WRITE|REMOTE_READ", with undefined bits last in hex; "0" for none.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var s strings.Builder
	for _, f := range accessNames {
		if a&f.a != 0 {
			if s.Len() > 0 {
				s.WriteByte('|')
			}
			s.WriteString(f.name)
		}
	}
	if rest := a &^ accessKnown; rest != 0 {
		if s.Len() > 0 {
			s.WriteByte('|')
		}
		fmt.Fprintf(&s, "%#x", uint32(rest))
	}
	return s.String()
}

// check reports whether a can be registered, by the rules of ibv_reg_mr(3)
// and the kernel's ib_check_mr_access: only defined flags, and REMOTE_WRITE
// or REMOTE_ATOMIC only together with LOCAL_WRITE (IBA 10.6: a remote
// access right that writes implies the local one).
func (a Access) check() error {
	if rest := a &^ accessKnown; rest != 0 {
		return fmt.Errorf("%w: undefined flags %#x in %v", ErrInvalidAccess, uint32(rest), a)
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: %v without LOCAL_WRITE", ErrInvalidAccess, a)
	}
	return nil
}
