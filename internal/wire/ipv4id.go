package wire

import "math/bits"

// A UDP socket does not see the IPv4 identification field, yet the ICRC
// covers it, and rxe sends a changing ID. Because a CRC is linear over
// GF(2), the ID can be recovered instead of guessed: for packets of equal
// length, CRC(m ^ e) = CRC(m) ^ L(e), where L is the CRC of e with zero
// initial value and no final inversion. With e confined to the 16 bits of
// the ID, L(e) is a linear map from 16 bits to 32; CRC-32 detects every
// burst of up to 32 bits, so the map is injective and the equation
// L(e) = stored ^ CRC(ID 0) has at most one solution. Solving it is a
// 16-column Gaussian elimination.
//
// What this buys: a packet is accepted only if some ID makes its ICRC
// correct, so a random corruption survives with probability 2^-16 instead
// of 2^-32. Receivers that know what ID the peer sends (0 from an
// unconnected DF socket, or the next value of a counter) can compare the
// recovered ID with it and regain the full strength.

// RecoverIPv4ID returns the IPv4 identification value with which pkt (BTH
// through ICRC) carries a correct ICRC, given the other header fields as a
// UDP socket reports them; f.ID is ignored. ok is false if no ID makes the
// ICRC correct. It does not allocate.
func RecoverIPv4ID(f *IPFields, pkt []byte) (id uint16, ok bool) {
	if len(pkt) < BTHLen+ICRCLen || !f.Src.Is4() {
		return 0, false
	}
	g := *f
	g.ID = 0
	body := pkt[:len(pkt)-ICRCLen]
	return IPv4IDFromDelta(len(body), StoredICRC(pkt)^g.ICRC(body))
}

// IPv4IDFromDelta is RecoverIPv4ID for a caller that has already computed
// the ICRC with ID 0: delta is the stored ICRC XOR that value, and bodyLen
// the length of the packet without its ICRC. A receiver that first tries
// ID 0 needs only this, not a second CRC over the packet.
func IPv4IDFromDelta(bodyLen int, delta uint32) (id uint16, ok bool) {
	d := delta
	// Bytes of CRC input after the ID field: the rest of the IPv4 header
	// (14), the UDP header and the packet up to its ICRC.
	shift := crcShift(IPv4Len - 6 + UDPLen + bodyLen)
	var basis [32]struct {
		vec  uint32
		comb uint16
	}
	var have uint32 // bit b set: basis[b] holds a row whose top bit is b
	// The ID's last bit on the wire (bit 7 of its second byte; the CRC
	// takes each byte least significant bit first) is followed by shift
	// zero bytes; each earlier bit is followed by one more zero bit, which
	// multiplies its contribution by x once more.
	row := crcMul(shift, crcFeed(0, []byte{0, 0x80}))
	for p := 15; p >= 0; p-- {
		var comb uint16
		if p >= 8 {
			comb = 1 << (p - 8) // the second byte: ID bits 0..7
		} else {
			comb = 1 << (p + 8) // the first byte: ID bits 8..15
		}
		v := row
		for v != 0 {
			b := 31 - bits.LeadingZeros32(v)
			if have&(1<<b) == 0 {
				basis[b].vec, basis[b].comb = v, comb
				have |= 1 << b
				break
			}
			v ^= basis[b].vec
			comb ^= basis[b].comb
		}
		row = crcMulX(row)
	}
	for d != 0 {
		b := 31 - bits.LeadingZeros32(d)
		if have&(1<<b) == 0 {
			return 0, false
		}
		d ^= basis[b].vec
		id ^= basis[b].comb
	}
	return id, true
}

// The CRC register in reflected form holds a polynomial over GF(2) with the
// coefficient of x^0 in bit 31 and that of x^31 in bit 0; feeding it a zero
// byte multiplies it by x^8 modulo the CRC-32 polynomial.
const (
	crcPoly = 0xedb88320 // x^32 + … + 1, reflected, without x^32
	crcOne  = 1 << 31    // x^0
)

// crcMul returns a·b modulo the CRC-32 polynomial, both in reflected form.
func crcMul(a, b uint32) uint32 {
	var p uint32
	for m := uint32(crcOne); m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// crcMulX returns a·x modulo the CRC-32 polynomial.
func crcMulX(a uint32) uint32 {
	if a&1 != 0 {
		return a>>1 ^ crcPoly
	}
	return a >> 1
}

// xPow8 holds x^(8·2^j) modulo the CRC-32 polynomial.
var xPow8 = func() (t [32]uint32) {
	t[0] = crcOne >> 8 // x^8
	for j := 1; j < len(t); j++ {
		t[j] = crcMul(t[j-1], t[j-1])
	}
	return t
}()

// crcShift returns x^(8n) modulo the CRC-32 polynomial: multiplying a
// register by it has the effect of feeding n zero bytes.
func crcShift(n int) uint32 {
	r := uint32(crcOne)
	for j := 0; n > 0; j, n = j+1, n>>1 {
		if n&1 != 0 {
			r = crcMul(r, xPow8[j])
		}
	}
	return r
}
