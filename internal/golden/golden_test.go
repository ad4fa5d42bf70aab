package golden

import (
	"strings"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

func TestDecode(t *testing.T) {
	d, err := Decode()
	if err != nil {
		t.Fatal(err)
	}
	if n := Count(d); n != 751 {
		t.Errorf("DECODE.txt lists %d RoCEv2 packets, want 751", n)
	}
	s, err := Summaries()
	if err != nil {
		t.Fatal(err)
	}
	for file, row := range s {
		if len(d[file]) != row.RoCEPackets {
			t.Errorf("%s: summary says %d RoCEv2 packets, DECODE.txt lists %d", file, row.RoCEPackets, len(d[file]))
		}
	}
	p := d["rc_write_64.pcap"][0]
	if p.Name() != "rc_write_64.pcap#20" || p.Op != "RC_WRITE_ONLY" || p.QPN != 0x14 || p.PSN != 5903548 ||
		p.UDPLen != 96 || p.Info != "RC RDMA Write Only QP=0x000014" || p.Src.String() != "198.18.0.2" {
		t.Errorf("first packet of rc_write_64: %+v", p)
	}
	paths, err := Pcaps()
	if err != nil || len(paths) != len(d) {
		t.Errorf("%d captures (%v), DECODE.txt has %d sections", len(paths), err, len(d))
	}
}

// TestFrames: gopacket finds, in every capture, the RoCEv2 datagrams
// DECODE.txt lists, in the same frames and with the same UDP lengths.
func TestFrames(t *testing.T) {
	d, err := Decode()
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range d {
		frames, err := Frames(strings.TrimSuffix(file, ".pcap"))
		if err != nil {
			t.Fatal(err)
		}
		var got []Packet
		for i, f := range frames {
			if udp, _ := f.Layer(layers.LayerTypeUDP).(*layers.UDP); udp != nil && udp.DstPort == 4791 {
				got = append(got, Packet{File: file, Frame: i + 1, UDPLen: len(udp.Payload)})
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d RoCEv2 frames, DECODE.txt lists %d", file, len(got), len(want))
			continue
		}
		for i := range got {
			if got[i].Frame != want[i].Frame || got[i].UDPLen != want[i].UDPLen {
				t.Errorf("%s: frame %d with %d bytes, DECODE.txt: frame %d with %d", file, got[i].Frame, got[i].UDPLen, want[i].Frame, want[i].UDPLen)
			}
		}
	}
	if _, err := Frames("no_such_capture"); err == nil {
		t.Error("Frames of a missing capture: no error")
	}
}
