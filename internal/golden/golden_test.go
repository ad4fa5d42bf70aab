package golden

import "testing"

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
