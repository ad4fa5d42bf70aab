// Package netns runs goroce's rc_pingpong and ud_pingpong between two
// network namespaces joined by a veth pair, and UD multicast groups across
// three, on a real (if virtual) network: the kernel's routing, its UDP
// sockets, nftables rules that drop, corrupt and ECN-mark packets on the
// way out, and process death.
//
// The package has no code of its own; its tests do the work. They need
// root (to create namespaces), and the ip (iproute2) and nft (nftables)
// commands; without them they skip and say why. CI runs them as root with
// both installed (.ci/run). To run them alone:
//
//	sudo go test -v ./test/netns
//
// The tests build cmd/rc_pingpong, cmd/ud_pingpong and cmd/ib_write_bw
// into a temporary directory. Each pingpong test creates its own pair of
// namespaces, goroce-t-<pid>-<n>-a and -b (internal/netns.NewVeth),
// holding the two
// ends of a veth pair, 198.18.10.1/24 in a and 198.18.10.2/24 in b (from
// 198.18.0.0/15, the range reserved for benchmarking, RFC 2544); the veth
// is created inside the namespaces, so nothing touches the host's own
// network. The server runs in a, the client in b, each under
// "ip netns exec". A test deletes the namespaces it made when it ends,
// pass or fail; a test binary killed before its cleanup can leave some
// behind (ip netns list | grep goroce-t; ip netns del NAME).
//
// The tests:
//
//   - TestPingpong: rc_pingpong -c with 1 MiB messages at veth MTU 9000
//     (active MTU 4096) and 1500 (active MTU 1024, which the device
//     enforces on the path MTU).
//   - TestPingpongFaults: the same through nftables rules in both
//     namespaces' output chains (2% dropped, 0.5% with a payload byte
//     overwritten, 10% CE-marked) and the client's own
//     --fault 'reorder=25%,dup=1%,delay=1ms,seed=7'. The run must succeed;
//     the nft counters must show that each rule fired, and the receivers'
//     icrc_errors (printed with GOROCE_PRINT_COUNTERS=1) that the ICRC
//     caught the corrupted packets; the client's go out with UDP checksum
//     0 (its fault stage sends without GSO), the server's with a checksum
//     (UDP GSO needs one); no receiver's kernel may drop one for a bad
//     UDP checksum.
//   - TestPingpongLoss: rc_pingpong -c with 256 KiB to 4 MiB messages,
//     MTU 1024 and 4096, through nftables rules in both namespaces'
//     prerouting chains that drop 2% or 5% of RoCEv2 packets and corrupt
//     0.2% more, with retry_cnt 7 and timeout 14: every message must
//     arrive intact. The veth segments UDP GSO sends before they cross
//     (gso_max_segs 1), so that a rule sees each packet as the wire would.
//   - TestStarvedReceiver: ib_write_bw with 16 QPs of 64 KiB WRITEs into
//     a server stopped (SIGSTOP) three times for 200 ms: every transfer
//     must complete.
//   - BenchmarkLossGoodput: rc_pingpong's goodput at 0.1% to 5% loss
//     against the lossless run (docs/RELIABILITY.md).
//   - TestPeerKilled: kill -9 of the server mid-transfer; the client must
//     fail within a few seconds, naming the failure.
//   - TestUDPingpong: ud_pingpong -c with datagrams of the active MTU, 1024
//     bytes at veth MTU 1500 and 4096 at 9000, each one packet, none lost;
//     one byte more is refused.
//   - TestMulticastThreeNamespaces: three namespaces, goroce-t<pid>-<n>-m1
//     to -m3, each with a veth to a bridge (IGMP/MLD snooping off) in
//     goroce-t<pid>-<n>-br, at 198.18.11.1-3/24, then at
//     2001:2:0:b::1-3/64 (the IPv6 benchmarking range, RFC 5180). In each,
//     the test binary, re-executed with GOROCE_NETNS_MEMBER=1, attaches a
//     UD QP to the group 239.192.0.7, then ff15::7, and sends 20 datagrams
//     to it; every member must receive all 60, its own included, each with
//     the sender's address and QPN and the group in its GRH.
package netns
