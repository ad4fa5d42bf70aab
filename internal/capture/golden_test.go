package capture

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"
)

// pcapDir holds the golden captures copied from the interop run.
const pcapDir = "../../testdata/pcaps"

const roceport = 4791

// summaryRow is one line of summary.txt or summary_mtu4096.txt.
type summaryRow struct {
	rocePkts  int
	pcapBytes int64
}

var summaryLine = regexp.MustCompile(`^(\S+)\s+OK\s.*\broce_pkts=(\d+)\s+pcap_bytes=(\d+)`)

// readSummaries parses the capture.sh summary files, keyed by pcap name.
func readSummaries(t testing.TB) map[string]summaryRow {
	t.Helper()
	rows := map[string]summaryRow{}
	for _, name := range []string{"summary.txt", "summary_mtu4096.txt"} {
		f, err := os.Open(filepath.Join(pcapDir, name))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := summaryLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[2])
			b, _ := strconv.ParseInt(m[3], 10, 64)
			rows[m[1]+".pcap"] = summaryRow{rocePkts: n, pcapBytes: b}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return rows
}

// decodedPacket is one RoCE packet as listed in DECODE.txt: a tshark
// summary line and the icrc-check line for the same frame.
type decodedPacket struct {
	frame     int
	relTime   string // tshark's seconds since the first frame, "%.6f"
	tsharkSrc string // "LID: 65535" for CM requests, else an address
	src, dst  netip.Addr
	frameLen  int // Ethernet frame length
	roceLen   int // UDP payload length (icrc-check len=)
}

var (
	tsharkLine = regexp.MustCompile(`^\s*(\d+)\s+(\d+\.\d{6})\s+(.+?) → (\S+)\s+RRoCE (\d+) `)
	icrcLine   = regexp.MustCompile(`^(\S+\.pcap) #(\d+)\s+(\S+) -> (\S+) .*\blen=(\d+)\s`)
)

// readDecode parses DECODE.txt into the RoCE packets of each pcap.
func readDecode(t testing.TB) map[string][]decodedPacket {
	t.Helper()
	f, err := os.Open(filepath.Join(pcapDir, "DECODE.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]decodedPacket{}
	var name string
	var icrcIdx int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if s, ok := strings.CutPrefix(line, "=== "); ok {
			name, icrcIdx = s, 0
			out[name] = nil
			continue
		}
		if m := tsharkLine.FindStringSubmatch(line); m != nil && name != "" {
			p := decodedPacket{relTime: m[2], tsharkSrc: m[3]}
			p.frame, _ = strconv.Atoi(m[1])
			p.frameLen, _ = strconv.Atoi(m[5])
			p.dst = netip.MustParseAddr(m[4])
			out[name] = append(out[name], p)
			continue
		}
		if m := icrcLine.FindStringSubmatch(line); m != nil {
			if m[1] != name || icrcIdx >= len(out[name]) {
				t.Fatalf("DECODE.txt: icrc line %q outside its section", line)
			}
			p := &out[name][icrcIdx]
			icrcIdx++
			if fr, _ := strconv.Atoi(m[2]); fr != p.frame {
				t.Fatalf("DECODE.txt: icrc line %q does not follow tshark frame order (want #%d)", line, p.frame)
			}
			p.src = netip.MustParseAddr(m[3])
			if d := netip.MustParseAddr(m[4]); d != p.dst {
				t.Fatalf("DECODE.txt: %s frame %d: tshark dst %v, icrc-check dst %v", name, p.frame, p.dst, d)
			}
			p.roceLen, _ = strconv.Atoi(m[5])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for n, pkts := range out {
		for _, p := range pkts {
			if !p.src.IsValid() {
				t.Fatalf("DECODE.txt: %s frame %d has no icrc-check line", n, p.frame)
			}
		}
	}
	return out
}

// recordInfo reads the file with pcapgo alone: the number of records and
// the first record's timestamp.
func recordInfo(t testing.TB, path string) (n int, first time.Time) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			return n, first
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			first = ci.Timestamp
		}
		n++
	}
}

// readAll returns clones of every datagram in the file and the frame count.
func readAll(t testing.TB, path string) ([]Datagram, int) {
	t.Helper()
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []Datagram
	for {
		d, err := r.Next()
		if err == io.EOF {
			return out, r.Frames()
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.Clone())
	}
}

func TestGoldenPcaps(t *testing.T) {
	summaries := readSummaries(t)
	decode := readDecode(t)
	paths, err := filepath.Glob(filepath.Join(pcapDir, "*.pcap"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden pcaps in %s (%v)", pcapDir, err)
	}
	if len(summaries) != 26 {
		t.Errorf("summary files list %d captures, want 26", len(summaries))
	}
	for name := range summaries {
		if _, err := os.Stat(filepath.Join(pcapDir, name)); err != nil {
			t.Errorf("summary row without pcap: %v", err)
		}
	}
	for _, path := range paths {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".pcap"), func(t *testing.T) {
			t.Parallel()
			want, ok := decode[name]
			if !ok {
				t.Fatalf("no DECODE.txt section for %s", name)
			}
			row, hasRow := summaries[name]
			if hasRow {
				if row.rocePkts != len(want) {
					t.Errorf("summary roce_pkts=%d but DECODE.txt lists %d", row.rocePkts, len(want))
				}
				if fi, err := os.Stat(path); err != nil || fi.Size() != row.pcapBytes {
					t.Errorf("file size differs from summary pcap_bytes=%d (%v)", row.pcapBytes, err)
				}
			} else if name != "to_host_cm_req.pcap" {
				t.Errorf("no summary row")
			}

			dgs, frames := readAll(t, path)
			records, first := recordInfo(t, path)
			if frames != records {
				t.Errorf("Reader counted %d frames, pcapgo %d", frames, records)
			}
			var roce []Datagram
			for _, d := range dgs {
				if d.Malformed != nil {
					t.Errorf("frame %d: Malformed: %v", d.Frame, d.Malformed)
				}
				checkConsistent(t, d)
				if d.DstPort == roceport {
					roce = append(roce, d)
				}
			}
			if hasRow && len(roce) != row.rocePkts {
				t.Errorf("%d datagrams to port 4791, summary roce_pkts=%d", len(roce), row.rocePkts)
			}
			if len(roce) != len(want) {
				t.Fatalf("%d datagrams to port 4791, DECODE.txt lists %d", len(roce), len(want))
			}
			for i, d := range roce {
				w := want[i]
				if d.Frame != w.frame {
					t.Errorf("datagram %d: frame %d, tshark %d", i, d.Frame, w.frame)
					continue
				}
				if d.Src != w.src || d.Dst != w.dst {
					t.Errorf("frame %d: %v -> %v, DECODE.txt %v -> %v", d.Frame, d.Src, d.Dst, w.src, w.dst)
				}
				if a, err := netip.ParseAddr(w.tsharkSrc); err == nil && a != d.Src {
					t.Errorf("frame %d: src %v, tshark %v", d.Frame, d.Src, a)
				}
				if d.IPv6 != strings.Contains(name, "ipv6") || d.IPv6 != d.Src.Is6() {
					t.Errorf("frame %d: IPv6=%v src %v", d.Frame, d.IPv6, d.Src)
				}
				if got := 14 + len(d.IP); got != w.frameLen {
					t.Errorf("frame %d: Ethernet + IP length %d, tshark frame length %d", d.Frame, got, w.frameLen)
				}
				if len(d.Payload) != w.roceLen {
					t.Errorf("frame %d: payload %d bytes, icrc-check len=%d", d.Frame, len(d.Payload), w.roceLen)
				}
				rel := d.Time.Sub(first).Seconds()
				if got := fmt.Sprintf("%.6f", rel); got != w.relTime {
					t.Errorf("frame %d: relative time %s, tshark %s", d.Frame, got, w.relTime)
				}
			}
		})
	}
}
