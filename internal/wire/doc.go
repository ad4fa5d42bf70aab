// Package wire implements the InfiniBand transport headers of IBTA Volume 1
// (chapter 9: BTH, RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH,
// GRH), the Memory Placement Extensions (FETH for FLUSH, ATOMIC_WRITE), the
// RoCEv2 congestion notification packet and the invariant CRC of RoCEv2
// (IBTA Annex A17), byte-compatible with Linux Soft-RoCE (rdma_rxe).
//
// Each header is a byte-slice view (type BTH []byte) with getters and
// setters at fixed offsets and a Len constant, plus a plain fields struct
// whose Encode method builds the header. Views never copy and parsing never
// allocates: a Packet is filled in place by Packet.Parse.
//
// What follows which header is data, not code: the 256-entry opcode table
// (OpcodeInfo) says for every opcode which extension headers follow the BTH
// and in what order, whether it carries payload, and where it sits in a
// message.
package wire
