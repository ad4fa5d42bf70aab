package wire_test

import (
	"encoding/hex"
	"fmt"
	"net/netip"

	"github.com/goroce/goroce/internal/wire"
)

// An ACK that Linux Soft-RoCE sent (rc_write_64.pcap, frame 25): the UDP
// payload of a RoCEv2 datagram from 198.18.0.3:49552 to 198.18.0.2:4791.
const rxeACK = "1100ffff00000014005a14bc1f000001f2226372"

func ExamplePacket_Parse() {
	b, _ := hex.DecodeString(rxeACK)
	var p wire.Packet
	if err := p.Parse(b); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.BTH.Opcode(), p.Info.Class)
	fmt.Printf("qpn=0x%06x psn=%d\n", p.BTH.DestQP(), p.BTH.PSN())
	fmt.Println(p.AETH.AckSummary(), "msn", p.AETH.MSN())
	// Output:
	// RC_ACKNOWLEDGE ack
	// qpn=0x000014 psn=5903548
	// ACK credits=inv msn 1
}

// Checking a received packet's ICRC with what a UDP socket knows: the
// addresses and ports, but not the IPv4 identification, which rxe changes
// with every packet and the ICRC covers. RecoverIPv4ID finds it.
func ExampleRecoverIPv4ID() {
	b, _ := hex.DecodeString(rxeACK)
	f := wire.IPFields{
		Src: netip.MustParseAddr("198.18.0.3"), Dst: netip.MustParseAddr("198.18.0.2"),
		SrcPort: 49552, DstPort: wire.UDPPort, FlagsFrag: wire.DF,
	}
	id, ok := wire.RecoverIPv4ID(&f, b)
	fmt.Println(id, ok)
	b[len(b)-5] ^= 1 // one flipped payload bit: no ID makes the ICRC correct
	_, ok = wire.RecoverIPv4ID(&f, b)
	fmt.Println(ok)
	// Output:
	// 19542 true
	// false
}

// Building a packet: headers from fields, payload, pad, then the ICRC once
// the IP and UDP headers are known.
func ExampleBuild() {
	h := wire.Headers{
		BTH:  wire.BTHFields{Opcode: wire.OpWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11, AckReq: true, PSN: 100},
		RETH: wire.RETHFields{VA: 0x7f0000001000, RKey: 0x1234, DMALen: 5},
	}
	payload := []byte("hello")
	b := make([]byte, wire.BuildLen(h.BTH.Opcode, len(payload)))
	n := wire.Build(b, &h, payload)
	f := wire.IPFields{
		Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"),
		SrcPort: 0xc000, DstPort: wire.UDPPort, FlagsFrag: wire.DF,
	}
	wire.PutICRC(b, f.ICRC(b[:n-wire.ICRCLen]))
	fmt.Println(n, "bytes, pad", wire.BTH(b).PadCount())
	fmt.Printf("%x\n", b[:wire.BTHLen])
	// Output:
	// 40 bytes, pad 3
	// 0a30ffff0000001180000064
}
