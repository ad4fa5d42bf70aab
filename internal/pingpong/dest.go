package pingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// dest is one side's address as the pingpong examples exchange it over TCP
// (struct pingpong_dest in rdma-core's rc_pingpong.c, uc_pingpong.c and
// ud_pingpong.c, which send it in the same message).
type dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID verbs.GID
}

// msgLen is the size of the message each side sends: the text
// "LLLL:QQQQQQ:PPPPPP:" followed by 32 hex digits of GID and a NUL, as
// rdma-core writes sizeof "0000:000000:000000:" plus 32 digits.
const msgLen = 4 + 1 + 6 + 1 + 6 + 1 + 32 + 1

// doneMsg is what the client sends after reading the server's address, NUL
// included (write(fd, "done", sizeof "done")).
const doneMsg = "done\x00"

// marshal returns the message rdma-core's sprintf("%04x:%06x:%06x:%s")
// produces for d, with its terminating NUL.
func (d dest) marshal() [msgLen]byte {
	var m [msgLen]byte
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, wireGID(d.GID))
	copy(m[:], s) // the last byte stays NUL
	return m
}

// errMsg is wrapped by every error parseDest returns.
var errMsg = errors.New("malformed address message")

// parseDest decodes a message marshal produced. It insists on the fixed
// layout every rdma-core peer sends: the fields are zero-padded to their
// widths because LIDs are 16 bits and QPNs and PSNs 24.
func parseDest(m []byte) (dest, error) {
	var d dest
	if len(m) != msgLen || m[msgLen-1] != 0 {
		return d, fmt.Errorf("%w: want %d bytes ending in NUL, got %q", errMsg, msgLen, m)
	}
	f := strings.Split(string(m[:msgLen-1]), ":")
	if len(f) != 4 || len(f[0]) != 4 || len(f[1]) != 6 || len(f[2]) != 6 || len(f[3]) != 32 {
		return d, fmt.Errorf("%w: %q is not LLLL:QQQQQQ:PPPPPP:<32 hex digits>", errMsg, m[:msgLen-1])
	}
	var v [3]uint64
	for i := range v {
		var err error
		if v[i], err = strconv.ParseUint(f[i], 16, 32); err != nil {
			return d, fmt.Errorf("%w: field %d %q is not hex", errMsg, i+1, f[i])
		}
	}
	g, err := parseWireGID(f[3])
	if err != nil {
		return d, err
	}
	return dest{LID: uint16(v[0]), QPN: uint32(v[1]), PSN: uint32(v[2]), GID: g}, nil
}

// wireGID encodes a GID as gid_to_wire_gid does: four 32-bit words, each
// read from memory, converted with htobe32 and printed with %08x. The net
// effect on any host is the 16 bytes in order as 32 lowercase hex digits.
func wireGID(g verbs.GID) string { return hex.EncodeToString(g[:]) }

// parseWireGID reverses wireGID (wire_gid_to_gid).
func parseWireGID(s string) (verbs.GID, error) {
	var g verbs.GID
	if len(s) != 2*len(g) {
		return g, fmt.Errorf("%w: GID %q is not 32 hex digits", errMsg, s)
	}
	if _, err := hex.Decode(g[:], []byte(s)); err != nil {
		return g, fmt.Errorf("%w: GID %q is not 32 hex digits", errMsg, s)
	}
	return g, nil
}

// String formats d as rc_pingpong prints an address, after the "local
// address: " or "remote address: " label.
func (d dest) String() string { return d.format(", ") }

// udLocalString formats d as ud_pingpong prints its local address: with
// a colon before the GID where the remote address line has a comma.
func (d dest) udLocalString() string { return d.format(": ") }

func (d dest) format(gidSep string) string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x%sGID %s", d.LID, d.QPN, d.PSN, gidSep, ntop6(d.GID))
}

// ntop6 formats a GID as glibc's inet_ntop(AF_INET6) does: the longest run
// of two or more zero words (the first of equal runs) becomes "::", and an
// address whose first six words are zero, or the first five zero and the
// sixth 0xffff, ends in dotted IPv4. It differs from netip.Addr.String only
// in the first of those: glibc writes ::c612:2 as ::198.18.0.2.
func ntop6(g verbs.GID) string {
	var w [8]int
	for i := range w {
		w[i] = int(g[2*i])<<8 | int(g[2*i+1])
	}
	base, n := -1, 0 // the longest run of zero words
	for i := 0; i < 8; {
		if w[i] != 0 {
			i++
			continue
		}
		j := i
		for j < 8 && w[j] == 0 {
			j++
		}
		if j-i > n {
			base, n = i, j-i
		}
		i = j
	}
	if n < 2 {
		base, n = -1, 0
	}
	var b strings.Builder
	for i := 0; i < 8; i++ {
		if base >= 0 && i >= base && i < base+n {
			if i == base {
				b.WriteByte(':')
			}
			continue
		}
		if i != 0 {
			b.WriteByte(':')
		}
		if i == 6 && base == 0 && (n == 6 || n == 5 && w[5] == 0xffff) {
			fmt.Fprintf(&b, "%d.%d.%d.%d", g[12], g[13], g[14], g[15])
			return b.String()
		}
		fmt.Fprintf(&b, "%x", w[i])
	}
	if base >= 0 && base+n == 8 {
		b.WriteByte(':')
	}
	return b.String()
}

// rand48 is the generator behind glibc's srand48 and lrand48: a 48-bit
// linear congruential generator. rc_pingpong draws its initial PSN with
// lrand48() & 0xffffff after srand48(getpid() * time(NULL)).
type rand48 struct{ x uint64 }

const (
	rand48A    = 0x5deece66d
	rand48C    = 0xb
	rand48Mask = 1<<48 - 1
)

// newRand48 seeds the generator as srand48(seed) does: the seed's low 32
// bits become the high bits of the state, 0x330e the low 16.
func newRand48(seed int64) *rand48 { return &rand48{x: uint64(uint32(seed))<<16 | 0x330e} }

// lrand48 returns the next value, a non-negative 31-bit integer.
func (r *rand48) lrand48() uint32 {
	r.x = (r.x*rand48A + rand48C) & rand48Mask
	return uint32(r.x >> 17)
}
