package transport

// packets returns how many packets carry a message of n bytes at the
// given path MTU: one per MTU or part of one, and one for an empty
// message, which still takes a packet and its PSN.
func packets(n uint64, mtu int) int {
	return max(int((n+uint64(mtu)-1)/uint64(mtu)), 1)
}
