package wire_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/internal/wire"
)

// TestBTHSetters sets each field on an all-zero and an all-ones header and
// checks that exactly the field's bits change (IBA 9.2 layout).
func TestBTHSetters(t *testing.T) {
	tests := []struct {
		name string
		set  func(h wire.BTH)
		mask []byte // bits the setter may change
	}{
		{"opcode", func(h wire.BTH) { h.SetOpcode(0xff) }, []byte{0xff}},
		{"SE", func(h wire.BTH) { h.SetSE(true) }, []byte{0, 0x80}},
		{"MigReq", func(h wire.BTH) { h.SetMigReq(true) }, []byte{0, 0x40}},
		{"pad", func(h wire.BTH) { h.SetPadCount(3) }, []byte{0, 0x30}},
		{"TVer", func(h wire.BTH) { h.SetTVer(0xf) }, []byte{0, 0x0f}},
		{"P_Key", func(h wire.BTH) { h.SetPKey(0xffff) }, []byte{0, 0, 0xff, 0xff}},
		{"FECN", func(h wire.BTH) { h.SetFECN(true) }, []byte{0, 0, 0, 0, 0x80}},
		{"BECN", func(h wire.BTH) { h.SetBECN(true) }, []byte{0, 0, 0, 0, 0x40}},
		{"DestQP", func(h wire.BTH) { h.SetDestQP(0xffffff) }, []byte{0, 0, 0, 0, 0, 0xff, 0xff, 0xff}},
		{"AckReq", func(h wire.BTH) { h.SetAckReq(true) }, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0x80}},
		{"PSN", func(h wire.BTH) { h.SetPSN(0xffffff) }, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mask := make([]byte, wire.BTHLen)
			copy(mask, tt.mask)
			h := make(wire.BTH, wire.BTHLen)
			tt.set(h)
			if !bytes.Equal(h, mask) {
				t.Errorf("on zeros: %x, want %x", []byte(h), mask)
			}
			h = wire.BTH(bytes.Repeat([]byte{0xff}, wire.BTHLen))
			switch tt.name { // clear what the setter sets, on all-ones
			case "opcode":
				h.SetOpcode(0)
			case "SE":
				h.SetSE(false)
			case "MigReq":
				h.SetMigReq(false)
			case "pad":
				h.SetPadCount(0)
			case "TVer":
				h.SetTVer(0)
			case "P_Key":
				h.SetPKey(0)
			case "FECN":
				h.SetFECN(false)
			case "BECN":
				h.SetBECN(false)
			case "DestQP":
				h.SetDestQP(0)
			case "AckReq":
				h.SetAckReq(false)
			case "PSN":
				h.SetPSN(0)
			}
			for i := range h {
				if h[i] != ^mask[i] {
					t.Errorf("on ones: byte %d = %#x, want %#x", i, h[i], ^mask[i])
				}
			}
		})
	}
}

// TestBuildLayouts builds packets of the opcodes the captures lack and checks
// every header lands at its IBA offset with its value.
func TestBuildLayouts(t *testing.T) {
	h := wire.Headers{
		BTH:       wire.BTHFields{PKey: 0xffff, DestQP: 0x123456, PSN: 0xabcdef, SE: true},
		RETH:      wire.RETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, DMALen: 8},
		ImmDt:     wire.ImmDtFields{Imm: 0xdeadbeef},
		IETH:      wire.IETHFields{RKey: 0x0badf00d},
		FETH:      wire.FETHFields{PlacementType: wire.FlushPersistent, SelectivityLevel: wire.FlushSelMR},
		DETH:      wire.DETHFields{QKey: 0x11111111, SrcQP: 0x42},
		AETH:      wire.AETHFields{Syndrome: 0x62, MSN: 7},
		AtomicETH: wire.AtomicETHFields{VA: 0x1000, RKey: 5, SwapAdd: 6, Compare: 7},
	}
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	reth := append(append(binary.BigEndian.AppendUint64(nil, 0x1122334455667788), be32(0x99aabbcc)...), be32(8)...)
	tests := []struct {
		op      wire.Opcode
		payload []byte
		at      map[int][]byte // offset from the BTH → expected bytes
	}{
		{0x0b, []byte{1, 2, 3}, map[int][]byte{12: reth, 28: be32(0xdeadbeef), 32: {1, 2, 3, 0}}},
		{0x29, []byte{9}, map[int][]byte{12: be32(0xdeadbeef), 16: {9, 0, 0, 0}}},
		{0x17, nil, map[int][]byte{12: be32(0x0badf00d)}},
		{0x16, []byte{1, 2, 3, 4}, map[int][]byte{12: be32(0x0badf00d), 16: {1, 2, 3, 4}}},
		{0x1c, nil, map[int][]byte{12: {0, 0, 0, 0x12}, 16: reth}},
		{0x1d, []byte{1, 2, 3, 4, 5, 6, 7, 8}, map[int][]byte{12: reth, 28: {1, 2, 3, 4, 5, 6, 7, 8}}},
		{0x65, []byte{7}, map[int][]byte{12: {0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x42}, 20: be32(0xdeadbeef), 24: {7, 0, 0, 0}}},
		{0x11, nil, map[int][]byte{12: {0x62, 0, 0, 7}}},
	}
	var p wire.Packet
	for _, tt := range tests {
		t.Run(tt.op.String(), func(t *testing.T) {
			h.BTH.Opcode = tt.op
			b := make([]byte, wire.BuildLen(tt.op, len(tt.payload)))
			n := wire.Build(b, &h, tt.payload)
			if n != len(b) || n%4 != 0 {
				t.Fatalf("Build = %d, want %d (a multiple of 4)", n, len(b))
			}
			for off, want := range tt.at {
				if got := b[off : off+len(want)]; !bytes.Equal(got, want) {
					t.Errorf("at %d: %x, want %x", off, got, want)
				}
			}
			if err := p.Parse(b); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !bytes.Equal(p.Payload, tt.payload) || p.BTH.PadCount() != wire.PadCount(len(tt.payload)) {
				t.Errorf("payload %x pad %d, want %x pad %d", p.Payload, p.BTH.PadCount(), tt.payload, wire.PadCount(len(tt.payload)))
			}
			got := p.Headers()
			if got.BTH.Opcode != tt.op || got.BTH.DestQP != 0x123456 || got.BTH.PSN != 0xabcdef || !got.BTH.SE {
				t.Errorf("BTH %+v", got.BTH)
			}
			info := tt.op.Info()
			if info.Imm && got.ImmDt != h.ImmDt || info.Inv && got.IETH != h.IETH ||
				info.Has(wire.HdrRETH) && got.RETH != h.RETH || info.Has(wire.HdrFETH) && got.FETH != h.FETH ||
				info.Has(wire.HdrDETH) && got.DETH != h.DETH || info.Has(wire.HdrAETH) && got.AETH != h.AETH {
				t.Errorf("headers %+v, want those of %+v", got, h)
			}
		})
	}
}

func TestCNP(t *testing.T) {
	b := bytes.Repeat([]byte{0xee}, wire.CNPLen)
	wire.BuildCNP(b, 0x000777, 0xffff)
	want := []byte{0x81, 0, 0xff, 0xff, 0x40, 0, 0x07, 0x77, 0, 0, 0, 0}
	if !bytes.Equal(b[:wire.BTHLen], want) {
		t.Errorf("CNP BTH %x, want %x", b[:wire.BTHLen], want)
	}
	if !bytes.Equal(b[wire.BTHLen:wire.BTHLen+16], make([]byte, 16)) {
		t.Errorf("CNP reserved block %x, want zeros", b[wire.BTHLen:wire.BTHLen+16])
	}
	var p wire.Packet
	if err := p.Parse(b); err != nil || p.Info.Class != wire.ClassCNP || !p.BTH.BECN() || len(p.CNPReserved) != 16 {
		t.Errorf("Parse CNP: err %v class %v BECN %v reserved %d", err, p.Info.Class, p.BTH.BECN(), len(p.CNPReserved))
	}
}

// TestGRHLayoutGolden reads the IPv6 header of a golden RoCEv2 packet as a
// GRH: the two share one layout (IBA 8.3), which is what verbs applications
// find at the start of a UD receive buffer.
func TestGRHLayoutGolden(t *testing.T) {
	for _, g := range goldenPackets(t) {
		if !g.d.IPv6 {
			continue
		}
		grh := wire.GRH(g.d.IP[:wire.GRHLen])
		if grh.IPVer() != 6 || grh.NextHeader() != 17 || int(grh.PayLen()) != len(g.d.IP)-wire.IPv6Len {
			t.Errorf("%s: GRH %+v", g.name(), grh.Fields())
		}
		if s, d := grh.SGID(), grh.DGID(); s != g.d.Src.As16() || d != g.d.Dst.As16() {
			t.Errorf("%s: SGID %x DGID %x, want %v %v", g.name(), s, d, g.d.Src, g.d.Dst)
		}
		f := grh.Fields()
		b := make([]byte, wire.GRHLen)
		f.Encode(b)
		if !bytes.Equal(b, grh) {
			t.Errorf("%s: GRH re-encodes as %x, want %x", g.name(), b, []byte(grh))
		}
		return
	}
	t.Fatal("no IPv6 golden packet")
}

func TestGRHFields(t *testing.T) {
	f := wire.GRHFields{IPVer: 6, TClass: 0xab, FlowLabel: 0xcdef1, PayLen: 300, NextHeader: wire.NextHeaderIBA, HopLimit: 64}
	f.SGID[15], f.DGID[0] = 1, 0xfe
	b := make(wire.GRH, wire.GRHLen)
	f.Encode(b)
	if b[0] != 0x6a || b[1] != 0xbc || b[2] != 0xde || b[3] != 0xf1 || b[6] != 0x1b || b[7] != 64 || b[23] != 1 || b[24] != 0xfe {
		t.Errorf("GRH bytes %x", []byte(b))
	}
	if b.Fields() != f {
		t.Errorf("GRH fields %+v, want %+v", b.Fields(), f)
	}
}
