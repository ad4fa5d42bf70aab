package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
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

const pcapDir = "../../testdata/pcaps"

func goldenFiles(t *testing.T) []string {
	t.Helper()
	files, err := golden.Pcaps()
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func runCmd(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return o.String(), e.String(), code
}

// lineRE matches a packet line of `goroce decode`.
var lineRE = regexp.MustCompile(`^(\d+) (\S+) → (\S+) (RC|UC|UD|CNP) (\S+) qpn=0x([0-9a-f]{6}) psn=(\d+) ackreq=([01]) len=(\d+)(.*) icrc=(OK|BAD)$`)

func TestDecodeGolden(t *testing.T) {
	decode, err := golden.Decode()
	if err != nil {
		t.Fatal(err)
	}
	want := golden.ByName(decode)
	total := 0
	for _, path := range goldenFiles(t) {
		out, errOut, code := runCmd("decode", path)
		if code != 0 || errOut != "" {
			t.Errorf("decode %s: exit %d, stderr %q", path, code, errOut)
		}
		base := filepath.Base(path)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(line, "# ") {
				continue
			}
			total++
			m := lineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s: unexpected line %q", base, line)
				continue
			}
			w, ok := want[base+"#"+m[1]]
			if !ok {
				t.Errorf("%s: frame %s is not in DECODE.txt", base, m[1])
				continue
			}
			tr, name := w.Opcode()
			if m[2] != w.Src.String() || m[3] != w.Dst.String() || m[4] != tr || m[5] != name ||
				m[6] != fmt.Sprintf("%06x", w.QPN) || m[7] != strconv.Itoa(int(w.PSN)) || m[11] != "OK" {
				t.Errorf("%s: line\n  %s\ndisagrees with DECODE.txt\n  %+v", base, line, w)
			}
		}
	}
	if total != len(want) {
		t.Errorf("decoded %d RoCEv2 packets, DECODE.txt checks %d", total, len(want))
	}
}

// TestDecodeLines pins the exact output for one packet of each header kind.
func TestDecodeLines(t *testing.T) {
	tests := []struct{ file, line string }{
		{"rc_write_64.pcap", "20 198.18.0.2 → 198.18.0.3 RC RDMA_WRITE_ONLY qpn=0x000014 psn=5903548 ackreq=1 len=64 va=0x0000559c3a036000 rkey=0x000005c7 dlen=64 icrc=OK"},
		{"rc_write_64.pcap", "25 198.18.0.3 → 198.18.0.2 RC ACKNOWLEDGE qpn=0x000014 psn=5903548 ackreq=0 len=0 aeth=ACK credits=inv msn=1 icrc=OK"},
		{"rc_read_5000.pcap", "25 198.18.0.3 → 198.18.0.2 RC RDMA_READ_RESPONSE_LAST qpn=0x000017 psn=7650856 ackreq=0 len=904 aeth=ACK credits=inv msn=1 icrc=OK"},
		{"rc_atomic_cmpswap.pcap", "20 198.18.0.2 → 198.18.0.3 RC COMPARE_SWAP qpn=0x00001b psn=7880614 ackreq=1 len=0 va=0x000055be56e2b000 rkey=0x00000c76 swap=0x0000000000000000 compare=0x0000000000000000 icrc=OK"},
		{"rc_atomic_fadd.pcap", "25 198.18.0.3 → 198.18.0.2 RC ATOMIC_ACKNOWLEDGE qpn=0x00001a psn=12971353 ackreq=0 len=0 aeth=ACK credits=inv msn=1 orig=0x4f5523a9e01c9827 icrc=OK"},
		{"ud_send_64.pcap", "22 198.18.0.2 → 198.18.0.3 UD SEND_ONLY qpn=0x00001c psn=11309687 ackreq=0 len=64 qkey=0x11111111 srcqp=0x00001c icrc=OK"},
		{"rc_send_cm_64.pcap", "16 198.18.0.2 → 198.18.0.3 RC SEND_ONLY qpn=0x000023 psn=8053061 ackreq=1 len=2 pad=2 icrc=OK"},
		{"rc_write_64_ipv6.pcap", ""}, // filled below: an IPv6 line
	}
	for _, tt := range tests {
		out, _, code := runCmd("decode", filepath.Join(pcapDir, tt.file))
		if code != 0 {
			t.Errorf("%s: exit %d", tt.file, code)
		}
		if tt.line == "" {
			if !strings.Contains(out, "fe80::5054:ff:fe12:2 → fe80::5054:ff:fe12:3 RC RDMA_WRITE_ONLY") {
				t.Errorf("%s: no IPv6 RDMA_WRITE_ONLY line in\n%s", tt.file, out)
			}
			continue
		}
		if !strings.Contains(out, tt.line+"\n") {
			t.Errorf("%s: missing line\n  %s\nin\n%s", tt.file, tt.line, out)
		}
	}
}

func TestDecodeExitCodes(t *testing.T) {
	dir := t.TempDir()
	notPcap := filepath.Join(dir, "notes.txt")
	os.WriteFile(notPcap, []byte("hello, not a capture\n"), 0o644)
	good := filepath.Join(pcapDir, "rc_write_64.pcap")
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no files", []string{"decode"}, 2, "usage: goroce decode"},
		{"missing file", []string{"decode", filepath.Join(dir, "nope.pcap")}, 2, "nope.pcap: no such file"},
		{"not a pcap", []string{"decode", notPcap}, 2, "notes.txt: not a pcap or pcapng file"},
		{"good then missing", []string{"decode", good, filepath.Join(dir, "nope.pcap")}, 2, "nope.pcap"},
		{"good", []string{"decode", good}, 0, ""},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runCmd(tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.stderr) {
				t.Errorf("exit %d stderr %q; want exit %d and %q", code, errOut, tt.code, tt.stderr)
			}
		})
	}
}

// identity reports whether byte i (bit b) of a RoCEv2 IP packet is part of
// what makes the frame a RoCEv2 packet at all: the IP version, the IPv4
// protocol or IPv6 next header, and the UDP destination port. Flipping such
// a bit turns the frame into something else; decode must then not report a
// RoCEv2 packet with a good ICRC.
func identity(i, b, ipLen int, v6 bool) bool {
	switch {
	case i == 0 && b >= 4:
		return true
	case !v6 && i == 9, v6 && i == 6:
		return true
	case i == ipLen+2 || i == ipLen+3:
		return true
	}
	return false
}

// masked reports whether byte i, bit b is outside the ICRC (IBA A17.3.3).
func masked(i, b, ipLen int, v6 bool) bool {
	switch {
	case v6 && i == 0 && b < 4, v6 && (i == 1 || i == 2 || i == 3 || i == 7):
		return true
	case !v6 && (i == 1 || i == 8 || i == 10 || i == 11):
		return true
	case i == ipLen+6 || i == ipLen+7 || i == ipLen+wire.UDPLen+4:
		return true
	}
	return false
}

var ethHeader = func() []byte {
	h := []byte{0x52, 0x54, 0, 0x12, 0, 3, 0x52, 0x54, 0, 0x12, 0, 2, 0, 0}
	return h
}()

func frameOf(ip []byte, v6 bool) []byte {
	f := append([]byte(nil), ethHeader...)
	binary.BigEndian.PutUint16(f[12:], map[bool]uint16{false: 0x0800, true: 0x86dd}[v6])
	return append(f, ip...)
}

// TestDecodeDetectsBitFlips is the must-show: for every RoCEv2 packet of
// every golden capture, single bits are flipped across the ICRC-covered
// headers (IP, UDP, BTH, extended headers), a sample of the payload and the
// ICRC itself, each flip written as its own frame into a new pcap. decode
// must report every such frame as icrc=BAD or malformed and exit 1.
func TestDecodeDetectsBitFlips(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	dir := t.TempDir()
	flips := 0
	for _, path := range goldenFiles(t) {
		r, err := capture.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var frames [][]byte
		var kinds []bool // per frame: an identity bit was flipped
		var where []string
		for {
			d, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.DstPort != wire.UDPPort {
				continue
			}
			hdrEnd := d.IPHeaderLen + wire.UDPLen + wire.BTHLen + wire.AtomicETHLen
			var positions []int
			for range 12 { // header bytes
				positions = append(positions, rng.IntN(min(hdrEnd, len(d.IP))))
			}
			positions = append(positions, rng.IntN(len(d.IP)), len(d.IP)-1-rng.IntN(wire.ICRCLen))
			if len(frames) == 0 { // every header byte of the file's first packet
				positions = positions[:0]
				for i := range min(hdrEnd, len(d.IP)) {
					positions = append(positions, i)
				}
			}
			for _, i := range positions {
				for b := range 8 {
					if masked(i, b, d.IPHeaderLen, d.IPv6) {
						continue
					}
					ip := bytes.Clone(d.IP)
					ip[i] ^= 1 << b
					frames = append(frames, frameOf(ip, d.IPv6))
					kinds = append(kinds, identity(i, b, d.IPHeaderLen, d.IPv6))
					where = append(where, "packet "+itoa(d.Frame)+" byte "+itoa(i)+" bit "+itoa(b))
				}
			}
		}
		r.Close()
		flipped := filepath.Join(dir, filepath.Base(path))
		var buf bytes.Buffer
		if err := capture.WriteEthernetPcap(&buf, frames); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(flipped, buf.Bytes(), 0o644)
		out, errOut, code := runCmd("decode", flipped)
		if code != 1 {
			t.Errorf("%s: exit %d (stderr %q), want 1", flipped, code, errOut)
		}
		reported := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if frame, rest, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
				reported[frame] = rest
			}
		}
		for n, id := range kinds {
			flips++
			line, ok := reported[itoa(n+1)]
			switch {
			case id && ok && strings.HasSuffix(line, "icrc=OK"):
				t.Errorf("%s frame %d: identity bit flipped, still reported as good RoCEv2: %s", flipped, n+1, line)
			case !id && !ok:
				t.Errorf("%s frame %d (%s): flipped packet not reported", flipped, n+1, where[n])
			case !id && !strings.HasSuffix(line, "icrc=BAD") && !strings.Contains(line, "malformed"):
				t.Errorf("%s frame %d (%s): flipped packet reported as good: %s", flipped, n+1, where[n], line)
			}
		}
	}
	t.Logf("%d flipped packets decoded", flips)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
