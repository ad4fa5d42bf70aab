package link

// The UDP source port of a RoCEv2 packet carries no meaning for the receiver
// (rxe accepts any), but routers hash it to pick a path and NICs to pick a
// receive queue, so rxe gives each QP a fixed port: one flow per QP keeps
// its packets in order. Which port depends on how the QP got its address:
//
//   - When rxe creates a QP it sets
//     qp->src_port = RXE_ROCE_V2_SPORT + (hash_32(qpn, 14) & 0x3fff)
//     (drivers/infiniband/sw/rxe/rxe_qp.c: rxe_qp_init_req; hash_32 from
//     include/linux/hash.h). UD QPs and QP1, the GSI QP that carries CM
//     MADs, keep this port: SourcePort.
//
//   - Connected QPs (RC, UC) get a new port when modify_qp sets their
//     address vector, which on RoCE always has a GRH:
//     qp->src_port = rdma_get_udp_sport(grh.flow_label, qpn, dest_qp_num)
//     (drivers/infiniband/sw/rxe/rxe_verbs.c: rxe_modify_qp;
//     include/rdma/ib_verbs.h: rdma_get_udp_sport, rdma_calc_flow_label,
//     rdma_flow_label_to_udp_sport). perftest leaves the flow label 0, so
//     the port comes from the two QPNs; rdma_cm sets a flow label (carried
//     in the CM REQ's Primary Flow Label), and then the port comes from
//     it: FlowSourcePort.
//
// TestSourcePortGolden checks both against every packet of the golden rxe
// captures.

const (
	roceSportMin  = 0xc000     // RXE_ROCE_V2_SPORT, IB_ROCE_UDP_ENCAP_VALID_PORT_MIN
	goldenRatio32 = 0x61C88647 // GOLDEN_RATIO_32, include/linux/hash.h
	flowLabelMask = 0x000fffff // IB_GRH_FLOWLABEL_MASK
)

// hash32 is the kernel's hash_32(val, bits): the top bits of a
// multiplication by the golden ratio.
func hash32(val uint32, bits uint) uint32 {
	return (val * goldenRatio32) >> (32 - bits)
}

// SourcePort returns the UDP source port rxe sends a QP's packets from until
// the QP's address vector is set, and so for good for UD QPs and QP1:
// 0xC000 + (hash_32(qpn, 14) & 0x3fff).
func SourcePort(qpn uint32) uint16 {
	return uint16(roceSportMin + hash32(qpn, 14)&0x3fff)
}

// FlowSourcePort returns the UDP source port rxe sends a connected (RC or
// UC) QP's packets from once its address vector is set:
// rdma_get_udp_sport(flowLabel, qpn, destQPN). A zero flow label is replaced
// by one computed from the two QPNs, so both ends of a connection use the
// same port.
func FlowSourcePort(flowLabel, qpn, destQPN uint32) uint16 {
	fl := flowLabel & flowLabelMask
	if fl == 0 {
		fl = calcFlowLabel(qpn, destQPN)
	}
	// rdma_flow_label_to_udp_sport: fold the 20-bit label into 14 bits.
	low := fl&0x3fff ^ (fl&0xfc000)>>14
	return uint16(low | roceSportMin)
}

// calcFlowLabel is rdma_calc_flow_label: a flow label symmetric in the two
// QPNs, the 48-bit product folded to 20 bits.
func calcFlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & flowLabelMask)
}
