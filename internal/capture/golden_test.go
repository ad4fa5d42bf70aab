package capture

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/goroce/goroce/internal/golden"
)

// pcapDir holds the golden captures copied from the interop run.
const pcapDir = "../../testdata/pcaps"

const roceport = 4791

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
	summaries, err := golden.Summaries()
	if err != nil {
		t.Fatal(err)
	}
	decode, err := golden.Decode()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := golden.Pcaps()
	if err != nil {
		t.Fatal(err)
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
				if row.RoCEPackets != len(want) {
					t.Errorf("summary roce_pkts=%d but DECODE.txt lists %d", row.RoCEPackets, len(want))
				}
				if fi, err := os.Stat(path); err != nil || fi.Size() != row.PcapBytes {
					t.Errorf("file size differs from summary pcap_bytes=%d (%v)", row.PcapBytes, err)
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
			if hasRow && len(roce) != row.RoCEPackets {
				t.Errorf("%d datagrams to port 4791, summary roce_pkts=%d", len(roce), row.RoCEPackets)
			}
			if len(roce) != len(want) {
				t.Fatalf("%d datagrams to port 4791, DECODE.txt lists %d", len(roce), len(want))
			}
			for i, d := range roce {
				w := want[i]
				if d.Frame != w.Frame {
					t.Errorf("datagram %d: frame %d, tshark %d", i, d.Frame, w.Frame)
					continue
				}
				if d.Src != w.Src || d.Dst != w.Dst {
					t.Errorf("frame %d: %v -> %v, DECODE.txt %v -> %v", d.Frame, d.Src, d.Dst, w.Src, w.Dst)
				}
				if a, err := netip.ParseAddr(w.TsharkSrc); err == nil && a != d.Src {
					t.Errorf("frame %d: src %v, tshark %v", d.Frame, d.Src, a)
				}
				if d.IPv6 != strings.Contains(name, "ipv6") || d.IPv6 != d.Src.Is6() {
					t.Errorf("frame %d: IPv6=%v src %v", d.Frame, d.IPv6, d.Src)
				}
				if got := 14 + len(d.IP); got != w.FrameLen {
					t.Errorf("frame %d: Ethernet + IP length %d, tshark frame length %d", d.Frame, got, w.FrameLen)
				}
				if len(d.Payload) != w.UDPLen {
					t.Errorf("frame %d: payload %d bytes, icrc-check len=%d", d.Frame, len(d.Payload), w.UDPLen)
				}
				rel := d.Time.Sub(first).Seconds()
				if got := fmt.Sprintf("%.6f", rel); got != w.RelTime {
					t.Errorf("frame %d: relative time %s, tshark %s", d.Frame, got, w.RelTime)
				}
			}
		})
	}
}
