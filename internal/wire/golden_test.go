package wire_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/wire"
)

// The golden packets: every RoCEv2 datagram of the rxe captures in
// testdata/pcaps, recorded between two Linux Soft-RoCE guests.
const pcapDir = "../../testdata/pcaps"

type golden struct {
	file  string // base name of the pcap
	frame int
	d     capture.Datagram // cloned: owns its bytes
}

func (g *golden) name() string { return g.file + "#" + strconv.Itoa(g.frame) }

var (
	goldenOnce sync.Once
	goldenPkts []golden
	goldenErr  error
)

func goldenPackets(t testing.TB) []golden {
	t.Helper()
	goldenOnce.Do(func() {
		files, err := filepath.Glob(filepath.Join(pcapDir, "*.pcap"))
		if err != nil || len(files) == 0 {
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
					goldenPkts = append(goldenPkts, golden{filepath.Base(f), d.Frame, d.Clone()})
				}
			}
			r.Close()
		}
	})
	if goldenErr != nil {
		t.Fatalf("loading golden pcaps: %v", goldenErr)
	}
	if len(goldenPkts) < 500 {
		t.Fatalf("only %d golden RoCEv2 packets found in %s", len(goldenPkts), pcapDir)
	}
	return goldenPkts
}

// decodeLine is one line of the independent ICRC checker's output in
// DECODE.txt, e.g.
//
//	rc_write_64.pcap #20   198.18.0.2 -> 198.18.0.3 RC_WRITE_ONLY qpn=0x000014 psn=5903548 len=92 icrc=0c5a36f1 OK
type decodeLine struct {
	src, dst string
	op       string
	qpn, psn uint32
	udpLen   int
	icrc     uint32 // as the checker prints it: the wire bytes in order
}

var decodeRE = regexp.MustCompile(`^(\S+\.pcap) #(\d+)\s+(\S+) -> (\S+) (\S+)\s+qpn=0x([0-9a-f]+) psn=(\d+)\s+len=(\d+)\s+icrc=([0-9a-f]{8}) OK$`)

func readDecodeTxt(t *testing.T) map[string]decodeLine {
	t.Helper()
	f, err := os.Open(filepath.Join(pcapDir, "DECODE.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := map[string]decodeLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := decodeRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		qpn, _ := strconv.ParseUint(m[6], 16, 32)
		psn, _ := strconv.ParseUint(m[7], 10, 32)
		n, _ := strconv.Atoi(m[8])
		icrc, _ := strconv.ParseUint(m[9], 16, 32)
		lines[m[1]+"#"+m[2]] = decodeLine{m[3], m[4], m[5], uint32(qpn), uint32(psn), n, uint32(icrc)}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// checkerOps maps the checker's operation names to IBA operation codes.
var checkerOps = map[string]uint8{
	"SEND_FIRST": wire.OpSendFirst, "SEND_MIDDLE": wire.OpSendMiddle, "SEND_LAST": wire.OpSendLast,
	"SEND_LAST_IMM": wire.OpSendLastImm, "SEND_ONLY": wire.OpSendOnly, "SEND_ONLY_IMM": wire.OpSendOnlyImm,
	"WRITE_FIRST": wire.OpWriteFirst, "WRITE_MIDDLE": wire.OpWriteMiddle, "WRITE_LAST": wire.OpWriteLast,
	"WRITE_LAST_IMM": wire.OpWriteLastImm, "WRITE_ONLY": wire.OpWriteOnly, "WRITE_ONLY_IMM": wire.OpWriteOnlyImm,
	"READ_REQ": wire.OpReadRequest, "READ_RESP_FIRST": wire.OpReadResponseFirst,
	"READ_RESP_MIDDLE": wire.OpReadResponseMiddle, "READ_RESP_LAST": wire.OpReadResponseLast,
	"READ_RESP_ONLY": wire.OpReadResponseOnly, "ACK": wire.OpAcknowledge, "ATOMIC_ACK": wire.OpAtomicAcknowledge,
	"CMP_SWAP": wire.OpCompareSwap, "FETCH_ADD": wire.OpFetchAdd, "SEND_LAST_INV": wire.OpSendLastInv,
	"SEND_ONLY_INV": wire.OpSendOnlyInv,
}

func TestGoldenAgreesWithDecodeTxt(t *testing.T) {
	want := readDecodeTxt(t)
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
		tr, op, _ := strings.Cut(w.op, "_")
		if got := p.BTH.Opcode(); got.Transport().String() != tr || got.Op() != checkerOps[op] {
			t.Errorf("%s: opcode %v, DECODE.txt says %s", g.name(), got, w.op)
		}
		if got := p.BTH.DestQP(); got != w.qpn {
			t.Errorf("%s: dest QP 0x%06x, want 0x%06x", g.name(), got, w.qpn)
		}
		if got := p.BTH.PSN(); got != w.psn {
			t.Errorf("%s: PSN %d, want %d", g.name(), got, w.psn)
		}
		if got := len(g.d.Payload); got != w.udpLen {
			t.Errorf("%s: UDP payload %d bytes, want %d", g.name(), got, w.udpLen)
		}
		if got := binary.BigEndian.Uint32(p.ICRC); got != w.icrc {
			t.Errorf("%s: ICRC bytes %08x, want %08x", g.name(), got, w.icrc)
		}
		if g.d.Src.String() != w.src || g.d.Dst.String() != w.dst {
			t.Errorf("%s: %v → %v, want %s → %s", g.name(), g.d.Src, g.d.Dst, w.src, w.dst)
		}
	}
}

// tsharkRE matches tshark's summary lines in DECODE.txt, e.g.
//
//	20   0.051959   198.18.0.2 → 198.18.0.3   RRoCE 86 RC Compare Swap QP=0x00001b
//	1   0.000000   LID: 65535 → 198.18.0.3   RRoCE 322 CM: ConnectRequest
//
// Communication-management MADs go to QP1 and tshark prints no QP for
// them (and sometimes a LID for the source).
var tsharkRE = regexp.MustCompile(`^\s*(\d+)\s+\S+\s+(.+?) → (\S+)\s+RRoCE \d+ (.*?)(?:\s*QP=0x([0-9a-f]+))?\s*(?:\[Malformed Packet\])?\s*$`)

// TestGoldenAgreesWithTshark checks frame numbers, addresses and QPNs
// against Wireshark's dissector, which knows nothing of our code.
func TestGoldenAgreesWithTshark(t *testing.T) {
	f, err := os.Open(filepath.Join(pcapDir, "DECODE.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byName := map[string]*golden{}
	pkts := goldenPackets(t)
	for i := range pkts {
		byName[pkts[i].name()] = &pkts[i]
	}
	var file string
	var p wire.Packet
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "=== "); ok {
			file = name
			continue
		}
		m := tsharkRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n++
		g := byName[file+"#"+m[1]]
		if g == nil {
			t.Errorf("tshark shows %s frame %s, we found no RoCEv2 packet there", file, m[1])
			continue
		}
		if err := p.Parse(g.d.Payload); err != nil {
			t.Errorf("%s: %v", g.name(), err)
			continue
		}
		if (g.d.Src.String() != m[2] && !strings.HasPrefix(m[2], "LID:")) || g.d.Dst.String() != m[3] {
			t.Errorf("%s: %v → %v; tshark: %s → %s", g.name(), g.d.Src, g.d.Dst, m[2], m[3])
		}
		if strings.HasPrefix(m[4], "CM: ") {
			if p.BTH.Opcode() != wire.Opcode(wire.UD)<<5|wire.OpSendOnly || p.BTH.DestQP() != 1 {
				t.Errorf("%s: %v to QP 0x%x; tshark says %q, a MAD to QP1", g.name(), p.BTH.Opcode(), p.BTH.DestQP(), m[4])
			}
			continue
		}
		qpn, _ := strconv.ParseUint(m[5], 16, 32)
		if p.BTH.DestQP() != uint32(qpn) {
			t.Errorf("%s: qpn 0x%x; tshark says 0x%x", g.name(), p.BTH.DestQP(), qpn)
		}
		// tshark names the transport first ("RC Send Only", "UD Send Only").
		if tr := strings.Fields(m[4])[0]; tr != p.Info.Transport.String() {
			t.Errorf("%s: transport %v, tshark says %q", g.name(), p.Info.Transport, m[4])
		}
	}
	if n != len(pkts) {
		t.Errorf("tshark lists %d RoCEv2 packets, we found %d", n, len(pkts))
	}
}
