package link

import (
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/golden"
	"github.com/goroce/goroce/internal/wire"
)

func TestSourcePortVectors(t *testing.T) {
	// Worked by hand from the kernel formulas.
	for _, tc := range []struct {
		qpn  uint32
		want uint16
	}{
		{1, 0xd872},    // 0x61c88647 >> 18 = 0x1872
		{0x18, 0xcab3}, // 0x18 * 0x61c88647 = 0x9_2acc_96a8 → 0x2acc96a8 >> 18 = 0xab3
		{0, 0xc000},
	} {
		if got := SourcePort(tc.qpn); got != tc.want {
			t.Errorf("SourcePort(%#x) = %#x, want %#x", tc.qpn, got, tc.want)
		}
	}
	for _, tc := range []struct {
		fl, qpn, dqpn uint32
		want          uint16
	}{
		{0, 0x18, 0x18, 0xc240},       // label 24*24 = 0x240 (rc_send_64)
		{0xcf490, 0x27, 0x27, 0xf4a3}, // 0x3490 ^ (0xcc000 >> 14) = 0x34a3 (rping_64)
		{0xcf490, 0x99, 0x1, 0xf4a3},  // a label makes the QPNs irrelevant
		{0, 0x1000, 0x1000, 0xc010},   // 2^24 ^ 2^24>>20 = 0x1000010, masked to 20 bits: 0x10
	} {
		if got := FlowSourcePort(tc.fl, tc.qpn, tc.dqpn); got != tc.want {
			t.Errorf("FlowSourcePort(%#x, %#x, %#x) = %#x, want %#x", tc.fl, tc.qpn, tc.dqpn, got, tc.want)
		}
	}
	if FlowSourcePort(0, 0x123, 0x456) != FlowSourcePort(0, 0x456, 0x123) {
		t.Error("FlowSourcePort without a flow label is not symmetric in the QPNs")
	}
}

// TestSourcePortGolden checks the source port of every RoCEv2 packet in the
// golden rxe captures against the port rxe's rules give its sender:
//
//   - UD QPs and QP1 (CM MADs): SourcePort of the sending QP, named by the
//     DETH's source QP;
//   - RC and UC QPs set up by perftest (flow label 0): FlowSourcePort of the
//     two QPNs, which the tools' *.client.txt/*.server.txt print;
//   - RC QPs set up by rdma_cm: FlowSourcePort of the flow label in the CM
//     ConnectRequest that set up the connection.
func TestSourcePortGolden(t *testing.T) {
	paths, err := golden.Pcaps()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{} // captures in which each rule was checked
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".pcap")
		qpns := printedQPNs(t, strings.TrimSuffix(path, ".pcap"))
		used := map[string]bool{}
		labels := map[uint32]uint32{} // QPN of either end of an rdma_cm connection → its flow label
		var cm cmLabels
		r, err := capture.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for {
			d, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.DstPort != wire.UDPPort || d.Malformed != nil {
				continue
			}
			var p wire.Packet
			if err := p.Parse(d.Payload); err != nil {
				t.Fatalf("%s#%d: %v", name, d.Frame, err)
			}
			dqp := p.BTH.DestQP()
			var want uint16
			var kind string
			switch {
			case p.DETH != nil:
				want, kind = SourcePort(p.DETH.SrcQP()), "UD"
				if dqp == 1 {
					kind = "QP1"
					cm.add(p.Payload, labels)
				}
			case len(labels) > 0:
				// rdma_cm: both ends use the flow label of the
				// ConnectRequest, found by either end's QPN.
				fl, ok := labels[dqp]
				if !ok {
					t.Errorf("%s#%d: no ConnectRequest or ConnectReply for QP %#x", name, d.Frame, dqp)
					continue
				}
				want, kind = FlowSourcePort(fl, 0, 0), "rdma_cm"
			default:
				src, ok := qpns[d.Src]
				if !ok {
					t.Errorf("%s#%d: no QPN printed for %v", name, d.Frame, d.Src)
					continue
				}
				want, kind = FlowSourcePort(0, src, dqp), "perftest RC/UC"
			}
			if d.SrcPort != want {
				t.Errorf("%s#%d (%s, to QP %#x): source port %#x, want %#x", name, d.Frame, kind, dqp, d.SrcPort, want)
			}
			used[kind] = true
		}
		r.Close()
		for k := range used {
			kinds[k]++
		}
	}
	t.Logf("captures checked per rule: %v", kinds)
	for _, k := range []string{"UD", "QP1", "perftest RC/UC", "rdma_cm"} {
		if kinds[k] < 3 {
			t.Errorf("rule %q checked in %d captures, want at least 3", k, kinds[k])
		}
	}
	if kinds["UD"]+kinds["QP1"] < 5 {
		t.Errorf("SourcePort checked in %d captures, want at least 5", kinds["UD"]+kinds["QP1"])
	}
}

// cmLabels follows the IB CM handshake (IBA 12.6) to learn the flow label
// of each connection: the ConnectRequest (attribute 0x0010) carries the
// initiator's QPN and the primary flow label, the ConnectReply (0x0013) the
// responder's QPN and, as its remote communication ID, the request's.
type cmLabels struct {
	byComm map[uint32]uint32 // request's local communication ID → flow label
}

func (c *cmLabels) add(mad []byte, labels map[uint32]uint32) {
	const hdr = 24                           // MAD header; the CM message follows
	if len(mad) < hdr+92 || mad[1] != 0x07 { // management class: CM
		return
	}
	msg := mad[hdr:]
	switch binary.BigEndian.Uint16(mad[16:]) {
	case 0x0010: // REQ: local comm ID at 0, local QPN at 32, flow label in the top 20 bits at 88
		fl := binary.BigEndian.Uint32(msg[88:]) >> 12
		if c.byComm == nil {
			c.byComm = map[uint32]uint32{}
		}
		c.byComm[binary.BigEndian.Uint32(msg[0:])] = fl
		labels[binary.BigEndian.Uint32(msg[32:])>>8] = fl
	case 0x0013: // REP: remote comm ID at 4, local QPN at 12
		if fl, ok := c.byComm[binary.BigEndian.Uint32(msg[4:])]; ok {
			labels[binary.BigEndian.Uint32(msg[12:])>>8] = fl
		}
	}
}

var (
	// perftest: " local address: LID 0000 QPN 0x0018 PSN 0xb04eb3" then
	// " GID: 00:00:...:255:255:198:18:00:02" (decimal bytes);
	// ibv_*_pingpong: "  local address:  LID 0x0000, QPN 0x000026, PSN 0x55f158[:,] GID ::ffff:198.18.0.2".
	localQPN = regexp.MustCompile(`local address:.*QPN (0x[0-9a-f]+)(?:, PSN 0x[0-9a-f]+[:,] GID (\S+))?`)
	gidLine  = regexp.MustCompile(`^\s*GID: ([0-9:]+)$`)
)

// printedQPNs returns the local QPN each tool printed, keyed by its IP,
// from base.client.txt, base.server.txt and base.listener.txt.
func printedQPNs(t *testing.T, base string) map[netip.Addr]uint32 {
	out := map[netip.Addr]uint32{}
	for _, side := range []string{".client.txt", ".server.txt", ".listener.txt"} {
		text, err := os.ReadFile(base + side)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		for i, line := range lines {
			m := localQPN.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			qpn, err := strconv.ParseUint(m[1], 0, 32)
			if err != nil {
				t.Fatalf("%s%s: %q: %v", base, side, line, err)
			}
			var ip netip.Addr
			if m[2] != "" {
				ip, err = netip.ParseAddr(m[2])
			} else if i+1 < len(lines) && gidLine.MatchString(lines[i+1]) {
				ip, err = decimalGID(gidLine.FindStringSubmatch(lines[i+1])[1])
			} else {
				t.Fatalf("%s%s: no GID after %q", base, side, line)
			}
			if err != nil {
				t.Fatalf("%s%s: %v", base, side, err)
			}
			out[ip.Unmap()] = uint32(qpn)
		}
	}
	return out
}

// decimalGID parses perftest's GID format: 16 decimal bytes joined by ':'.
func decimalGID(s string) (netip.Addr, error) {
	var b [16]byte
	parts := strings.Split(s, ":")
	if len(parts) != 16 {
		return netip.Addr{}, strconv.ErrSyntax
	}
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 8)
		if err != nil {
			return netip.Addr{}, err
		}
		b[i] = byte(v)
	}
	return netip.AddrFrom16(b), nil
}
