package perftest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// Dest is what one side tells the other about a QP in the out-of-band
// exchange (perftest's struct pingpong_dest).
type Dest struct {
	LID      uint16
	OutReads int    // RDMA READs and atomics the QP accepts at once
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // where the peer's RDMA WRITEs, READs and atomics go
	GID      verbs.GID
	SRQN     uint32
}

// The key record perftest exchanges per QP: fixed-size ASCII ending in a
// NUL. On RoCE the GID is always there (perftest picks a GID index on an
// Ethernet link layer), so the record is the 108-byte form
// "%04x:%04x:%06x:%06x:%08x:%016llx:" + 16 × "%02x:" + "%08x:" + NUL;
// the 59-byte form without a GID is InfiniBand's.
const (
	recordLen      = 108
	recordLenNoGID = 59
)

// Marshal returns the 108-byte record.
func (d Dest) Marshal() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, x := range d.GID {
		fmt.Fprintf(&b, "%02x:", x)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	return append([]byte(b.String()), 0)
}

// ParseDest parses a record with a GID.
func ParseDest(m []byte) (Dest, error) {
	var d Dest
	if len(m) != recordLen {
		return d, fmt.Errorf("perftest: QP record of %d bytes, want %d", len(m), recordLen)
	}
	s := string(bytes.TrimRight(m, "\x00"))
	f := strings.Split(s, ":")
	// 6 fields, 16 GID bytes, the SRQN, and the empty tail after the last ':'.
	if len(f) != 6+16+2 || f[len(f)-1] != "" {
		return d, fmt.Errorf("perftest: malformed QP record %q", s)
	}
	var v [6 + 16 + 1]uint64
	widths := [...]int{4, 4, 6, 6, 8, 16}
	for i := range v {
		w := 2
		switch {
		case i < len(widths):
			w = widths[i]
		case i == len(v)-1:
			w = 8
		}
		x, err := strconv.ParseUint(f[i], 16, w*4)
		if err != nil || len(f[i]) != w {
			return d, fmt.Errorf("perftest: QP record field %d %q: want %d hex digits", i+1, f[i], w)
		}
		v[i] = x
	}
	d = Dest{LID: uint16(v[0]), OutReads: int(v[1]), QPN: uint32(v[2]), PSN: uint32(v[3]), RKey: uint32(v[4]),
		VAddr: v[5], SRQN: uint32(v[22])}
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	return d, nil
}
