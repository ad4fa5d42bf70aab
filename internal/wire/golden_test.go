package wire_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/golden"
	"github.com/goroce/goroce/internal/wire"
)

// The golden packets: every RoCEv2 datagram of the rxe captures in
// testdata/pcaps, recorded between two Linux Soft-RoCE guests.
const pcapDir = "../../testdata/pcaps"

type capturedPkt struct {
	file  string // base name of the pcap
	frame int
	d     capture.Datagram // cloned: owns its bytes
}

func (g *capturedPkt) name() string { return g.file + "#" + strconv.Itoa(g.frame) }

var (
	goldenOnce sync.Once
	goldenPkts []capturedPkt
	goldenErr  error
)

func goldenPackets(t testing.TB) []capturedPkt {
	t.Helper()
	goldenOnce.Do(func() {
		files, err := golden.Pcaps()
		if err != nil {
			goldenErr = err
			return
		}
		for _, f := range files {
			r, err := capture.Open(f)
			if err != nil {
				goldenErr = err
				return
			}
			for {
				d, err := r.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					goldenErr = err
					return
				}
				if d.DstPort == wire.UDPPort && d.Malformed == nil {
					goldenPkts = append(goldenPkts, capturedPkt{filepath.Base(f), d.Frame, d.Clone()})
				}
			}
			r.Close()
		}
	})
	if goldenErr != nil {
		t.Fatalf("loading golden pcaps: %v", goldenErr)
	}
	if len(goldenPkts) < 500 {
		t.Fatalf("only %d golden RoCEv2 packets found", len(goldenPkts))
	}
	return goldenPkts
}

func TestGoldenAgreesWithDecodeTxt(t *testing.T) {
	decode, err := golden.Decode()
	if err != nil {
		t.Fatal(err)
	}
	want := golden.ByName(decode)
	pkts := goldenPackets(t)
	if len(pkts) != len(want) {
		t.Errorf("found %d RoCEv2 packets in the pcaps, DECODE.txt lists %d", len(pkts), len(want))
	}
	var p wire.Packet
	for _, g := range pkts {
		w, ok := want[g.name()]
		if !ok {
			t.Errorf("%s: not in DECODE.txt", g.name())
			continue
		}
		if err := p.Parse(g.d.Payload); err != nil {
			t.Errorf("%s: Parse: %v", g.name(), err)
			continue
		}
		// The checker's view.
		if tr, name := w.Opcode(); p.BTH.Opcode().String() != tr+"_"+name {
			t.Errorf("%s: opcode %v, the checker says %s", g.name(), p.BTH.Opcode(), w.Op)
		}
		if got := p.BTH.DestQP(); got != w.QPN {
			t.Errorf("%s: dest QP 0x%06x, want 0x%06x", g.name(), got, w.QPN)
		}
		if got := p.BTH.PSN(); got != w.PSN {
			t.Errorf("%s: PSN %d, want %d", g.name(), got, w.PSN)
		}
		if got := len(g.d.Payload); got != w.UDPLen {
			t.Errorf("%s: UDP payload %d bytes, want %d", g.name(), got, w.UDPLen)
		}
		if got := binary.BigEndian.Uint32(p.ICRC); got != w.ICRC {
			t.Errorf("%s: ICRC bytes %08x, want %08x", g.name(), got, w.ICRC)
		}
		if g.d.Src != w.Src || g.d.Dst != w.Dst {
			t.Errorf("%s: %v → %v, want %v → %v", g.name(), g.d.Src, g.d.Dst, w.Src, w.Dst)
		}
		// tshark's view, which knows nothing of our code or the checker's.
		// CM MADs go to QP1; tshark names them "CM: …" without a QP.
		if strings.HasPrefix(w.Info, "CM: ") {
			if p.BTH.Opcode() != wire.Opcode(wire.UD)<<5|wire.OpSendOnly || p.BTH.DestQP() != 1 {
				t.Errorf("%s: %v to QP 0x%x; tshark says %q, a MAD to QP1", g.name(), p.BTH.Opcode(), p.BTH.DestQP(), w.Info)
			}
			continue
		}
		var qpn uint32
		if _, err := fmt.Sscanf(w.Info[strings.Index(w.Info, "QP=0x"):], "QP=0x%x", &qpn); err != nil || qpn != p.BTH.DestQP() {
			t.Errorf("%s: dest QP 0x%x; tshark says %q", g.name(), p.BTH.DestQP(), w.Info)
		}
		// tshark names the transport first ("RC Send Only", "UD Send Only").
		if tr := strings.Fields(w.Info)[0]; tr != p.Info.Transport.String() {
			t.Errorf("%s: transport %v, tshark says %q", g.name(), p.Info.Transport, w.Info)
		}
	}
}
