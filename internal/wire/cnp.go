package wire

// CNPReservedLen is the length of the reserved block that follows the BTH
// of a RoCEv2 Congestion Notification Packet (IBA Annex A17.9.3: BTH with
// opcode 0x81, 16 reserved bytes, ICRC).
const CNPReservedLen = 16

// CNPLen is the length of a whole CNP as a UDP payload.
const CNPLen = BTHLen + CNPReservedLen + ICRCLen

// BuildCNP writes a congestion notification packet into b[:CNPLen] without
// its ICRC (the caller computes it over the IP and UDP headers): the BTH
// names the QP whose traffic was CE-marked, with the BECN bit set as RoCEv2
// notification points do, and the reserved block is zero.
func BuildCNP(b []byte, destQP uint32, pkey uint16) {
	f := BTHFields{Opcode: OpCNP, PKey: pkey, BECN: true, DestQP: destQP}
	f.Encode(b)
	clear(b[BTHLen : BTHLen+CNPReservedLen])
}
