// Package golden gives tests the golden captures of Linux Soft-RoCE traffic
// in testdata/pcaps and what independent tools said about them: tshark's
// dissection and the interop harness's ICRC checker (DECODE.txt), and the
// capture script's per-test summary (summary*.txt), and the captures'
// frames decoded by gopacket. It imports nothing of goroce, so any
// package's tests can use it.
package golden

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/pcapgo"
)

// Dir returns the directory of the golden captures, testdata/pcaps at the
// module root, found from the working directory (a package directory when
// tests run).
func Dir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "testdata", "pcaps"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("golden: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Pcaps returns the paths of all golden captures.
func Pcaps() ([]string, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	if err == nil && len(paths) == 0 {
		err = fmt.Errorf("golden: no captures in %s", dir)
	}
	return paths, err
}

// Frames decodes the golden capture name (e.g. "rc_write_lat_64", without
// ".pcap") with gopacket and returns its frames in capture order.
func Frames(name string) ([]gopacket.Packet, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, name+".pcap"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("golden: %s: %w", name, err)
	}
	var frames []gopacket.Packet
	for pkt := range gopacket.NewPacketSource(r, r.LinkType()).Packets() {
		if err := pkt.ErrorLayer(); err != nil {
			return nil, fmt.Errorf("golden: %s frame %d: %v", name, len(frames)+1, err.Error())
		}
		frames = append(frames, pkt)
	}
	return frames, nil
}

// Packet is one RoCEv2 packet as DECODE.txt lists it: tshark's summary line
// and the ICRC checker's line for the same frame, which agree on the frame
// number and destination.
type Packet struct {
	File  string // base name of the capture, e.g. "rc_write_64.pcap"
	Frame int    // 1-based frame number

	// From tshark.
	RelTime   string // seconds since the first frame, "%.6f"
	TsharkSrc string // the source as tshark prints it: an address, or "LID: 65535" for some CM MADs
	FrameLen  int    // Ethernet frame length
	Info      string // e.g. "RC Send Only QP=0x000023", "CM: ConnectRequest"

	// From the ICRC checker.
	Src, Dst netip.Addr
	Op       string // transport and operation, e.g. "RC_WRITE_ONLY", "UD_SEND_ONLY", "RC_READ_RESP_FIRST"
	QPN, PSN uint32
	UDPLen   int    // the UDP payload length: BTH through ICRC
	ICRC     uint32 // the four ICRC bytes in wire order, as a big-endian number
}

// Name is "file#frame", a unique key for the packet.
func (p *Packet) Name() string { return p.File + "#" + strconv.Itoa(p.Frame) }

var (
	tsharkLine = regexp.MustCompile(`^\s*(\d+)\s+(\d+\.\d{6})\s+(.+?) → (\S+)\s+RRoCE (\d+) (.*?)\s*$`)
	checkLine  = regexp.MustCompile(`^(\S+\.pcap) #(\d+)\s+(\S+) -> (\S+) (\S+)\s+qpn=0x([0-9a-f]+) psn=(\d+)\s+len=(\d+)\s+icrc=([0-9a-f]{8}) OK$`)
)

// Decode parses DECODE.txt: the RoCEv2 packets of each capture, keyed by
// base name, in frame order. It fails if the two tools' lines do not pair
// up frame by frame.
func Decode() (map[string][]Packet, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "DECODE.txt"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][]Packet{}
	var name string
	next := 0 // the packet of the section the next checker line belongs to
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "=== "); ok {
			name, next = s, 0
			out[name] = nil
			continue
		}
		if m := tsharkLine.FindStringSubmatch(line); m != nil && name != "" {
			p := Packet{File: name, RelTime: m[2], TsharkSrc: m[3], Info: m[6]}
			p.Frame, _ = strconv.Atoi(m[1])
			p.FrameLen, _ = strconv.Atoi(m[5])
			p.Dst, err = netip.ParseAddr(m[4])
			if err != nil {
				return nil, fmt.Errorf("golden: DECODE.txt: %q: %v", line, err)
			}
			out[name] = append(out[name], p)
			continue
		}
		m := checkLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if m[1] != name || next >= len(out[name]) {
			return nil, fmt.Errorf("golden: DECODE.txt: checker line %q outside its section", line)
		}
		p := &out[name][next]
		next++
		if fr, _ := strconv.Atoi(m[2]); fr != p.Frame {
			return nil, fmt.Errorf("golden: DECODE.txt: checker line %q does not follow tshark's frame %d", line, p.Frame)
		}
		p.Src, err = netip.ParseAddr(m[3])
		if err != nil {
			return nil, fmt.Errorf("golden: DECODE.txt: %q: %v", line, err)
		}
		if d, err := netip.ParseAddr(m[4]); err != nil || d != p.Dst {
			return nil, fmt.Errorf("golden: DECODE.txt: %s: checker destination %s, tshark %v", p.Name(), m[4], p.Dst)
		}
		p.Op = m[5]
		qpn, _ := strconv.ParseUint(m[6], 16, 32)
		psn, _ := strconv.ParseUint(m[7], 10, 32)
		icrc, _ := strconv.ParseUint(m[9], 16, 32)
		p.QPN, p.PSN, p.ICRC = uint32(qpn), uint32(psn), uint32(icrc)
		p.UDPLen, _ = strconv.Atoi(m[8])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, pkts := range out {
		for _, p := range pkts {
			if !p.Src.IsValid() {
				return nil, fmt.Errorf("golden: DECODE.txt: %s has no checker line", p.Name())
			}
		}
	}
	return out, nil
}

// Summary is one capture's row in summary.txt or summary_mtu4096.txt.
type Summary struct {
	RoCEPackets int
	PcapBytes   int64
}

var summaryLine = regexp.MustCompile(`^(\S+)\s+OK\s.*\broce_pkts=(\d+)\s+pcap_bytes=(\d+)`)

// Summaries parses the capture script's summary files, keyed by base name.
func Summaries() (map[string]Summary, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	rows := map[string]Summary{}
	for _, name := range []string{"summary.txt", "summary_mtu4096.txt"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			m := summaryLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[2])
			b, _ := strconv.ParseInt(m[3], 10, 64)
			rows[m[1]+".pcap"] = Summary{RoCEPackets: n, PcapBytes: b}
		}
	}
	return rows, nil
}

// Count returns the number of packets in a Decode result.
func Count(d map[string][]Packet) int {
	n := 0
	for _, pkts := range d {
		n += len(pkts)
	}
	return n
}

// checkerOps maps the ICRC checker's short operation names to IBA names.
var checkerOps = map[string]string{
	"SEND_FIRST": "SEND_FIRST", "SEND_MIDDLE": "SEND_MIDDLE", "SEND_LAST": "SEND_LAST",
	"SEND_LAST_IMM": "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY": "SEND_ONLY", "SEND_ONLY_IMM": "SEND_ONLY_WITH_IMMEDIATE",
	"WRITE_FIRST": "RDMA_WRITE_FIRST", "WRITE_MIDDLE": "RDMA_WRITE_MIDDLE", "WRITE_LAST": "RDMA_WRITE_LAST",
	"WRITE_LAST_IMM": "RDMA_WRITE_LAST_WITH_IMMEDIATE", "WRITE_ONLY": "RDMA_WRITE_ONLY",
	"WRITE_ONLY_IMM": "RDMA_WRITE_ONLY_WITH_IMMEDIATE", "READ_REQ": "RDMA_READ_REQUEST",
	"READ_RESP_FIRST": "RDMA_READ_RESPONSE_FIRST", "READ_RESP_MIDDLE": "RDMA_READ_RESPONSE_MIDDLE",
	"READ_RESP_LAST": "RDMA_READ_RESPONSE_LAST", "READ_RESP_ONLY": "RDMA_READ_RESPONSE_ONLY",
	"ACK": "ACKNOWLEDGE", "ATOMIC_ACK": "ATOMIC_ACKNOWLEDGE", "CMP_SWAP": "COMPARE_SWAP",
	"FETCH_ADD": "FETCH_ADD", "SEND_LAST_INV": "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_INV": "SEND_ONLY_WITH_INVALIDATE",
}

// Opcode splits the checker's operation name (Packet.Op) into the transport
// and the IBA operation name, e.g. "RC_WRITE_ONLY" → "RC", "RDMA_WRITE_ONLY".
// name is empty for an operation the checker names by number.
func (p *Packet) Opcode() (transport, name string) {
	transport, op, _ := strings.Cut(p.Op, "_")
	return transport, checkerOps[op]
}

// ByName indexes a Decode result by Packet.Name.
func ByName(d map[string][]Packet) map[string]Packet {
	m := make(map[string]Packet, Count(d))
	for _, pkts := range d {
		for _, p := range pkts {
			m[p.Name()] = p
		}
	}
	return m
}
