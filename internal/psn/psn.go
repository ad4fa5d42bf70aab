// Package psn implements the 24-bit packet sequence numbers of the
// InfiniBand transport (IBA 9.7.1): arithmetic modulo 2^24 and comparisons
// that stay correct across wrap-around, the way serial numbers are compared
// (RFC 1982) and rxe's psn_compare does.
package psn

import "fmt"

// PSN is a packet sequence number. Only the low 24 bits are used; values
// are always kept reduced. Never compare PSNs with < or >: use Before,
// After or Diff.
type PSN uint32

const (
	// Bits is the width of a PSN.
	Bits = 24
	// Mask keeps the low 24 bits.
	Mask = 1<<Bits - 1
	// HalfSpace is the largest distance Diff can report in either direction.
	HalfSpace = 1 << (Bits - 1)
)

// New reduces v to a PSN.
func New(v uint32) PSN { return PSN(v & Mask) }

// Add returns p advanced by n (n may be negative), modulo 2^24.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & Mask) }

// Next returns p + 1.
func (p PSN) Next() PSN { return PSN((uint32(p) + 1) & Mask) }

// Diff returns the signed distance from q to p: p - q interpreted in
// [-2^23, 2^23). Diff(q) > 0 means p comes after q.
func (p PSN) Diff(q PSN) int {
	d := int32(uint32(p)-uint32(q)) << (32 - Bits) >> (32 - Bits) // sign-extend 24 bits
	return int(d)
}

// Before reports whether p comes before q.
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p comes after q.
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p lies in the n PSNs starting at first:
// first <= p < first+n. n must be at most HalfSpace.
func (p PSN) InWindow(first PSN, n int) bool {
	d := p.Diff(first)
	return d >= 0 && d < n
}

// String prints the PSN as perftest does: 0x followed by six hex digits.
func (p PSN) String() string { return fmt.Sprintf("0x%06x", uint32(p)) }
