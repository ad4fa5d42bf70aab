package capture

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	golden, err := os.ReadFile(filepath.Join(pcapDir, "rc_write_64.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"text", filepath.Join(pcapDir, "DECODE.txt"), "not a pcap or pcapng file"},
		{"empty", write("empty.pcap", nil), "not a pcap or pcapng file"},
		{"three bytes", write("short.pcap", golden[:3]), "not a pcap or pcapng file"},
		{"header cut", write("cut.pcap", golden[:20]), "bad pcap header"},
		{"bad version", write("version.pcap", append([]byte{0xd4, 0xc3, 0xb2, 0xa1, 9, 0}, golden[6:]...)), "bad pcap header"},
		{"missing", filepath.Join(dir, "nonexistent.pcap"), "no such file"},
		{"802.11", write("wifi.pcap", pcapOf(t, layers.LinkTypeIEEE802_11)), "unsupported link type 105"},
		{"pcapng garbage", write("bad.pcapng", []byte{0x0a, 0x0d, 0x0d, 0x0a, 1, 2, 3}), "bad pcapng header"},
		{"gzip garbage", write("bad.pcap.gz", []byte{0x1f, 0x8b, 0, 0, 0}), "bad gzip stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Open(tt.path)
			if err == nil {
				r.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %q does not contain %q and the file name", err, tt.want)
			}
		})
	}
	if _, err := NewReader(strings.NewReader("hello, world\n")); err == nil ||
		err.Error() != "capture: not a pcap or pcapng file (starts with 68656c6c)" {
		t.Errorf("NewReader on text: %v", err)
	}
}

func TestTruncatedFile(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join(pcapDir, "rc_write_64.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	// 24-byte file header, then frame 1: 16-byte record header + data.
	end1 := 24 + 16 + int(binary.LittleEndian.Uint32(golden[32:]))
	for _, cut := range []int{end1 + 5, end1 + 16, end1 + 16 + 3} {
		r, err := NewReader(bytes.NewReader(golden[:cut]))
		if err != nil {
			t.Fatal(err)
		}
		var errs []error
		for range 3 {
			_, err := r.Next()
			errs = append(errs, err)
		}
		if !errors.Is(errs[0], io.ErrUnexpectedEOF) || !strings.Contains(errs[0].Error(), "frame 2") {
			t.Errorf("cut at %d: %v, want unexpected EOF in frame 2", cut, errs[0])
		}
		if errs[1] != errs[0] || errs[2] != errs[0] {
			t.Errorf("error not repeated: %v", errs)
		}
	}
	if dgs := datagrams(t, golden[:24]); len(dgs) != 0 {
		t.Errorf("header-only file: %d datagrams", len(dgs))
	}
}

func TestPcapng(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	ifSLL, err := w.AddInterface(pcapgo.NgInterface{Name: "any", LinkType: layers.LinkTypeLinuxSLL2, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	ifWifi, err := w.AddInterface(pcapgo.NgInterface{Name: "wlan0", LinkType: layers.LinkTypeIEEE802_11, TimestampResolution: 9})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 21, 51, 55, 123456789, time.UTC)
	frames := []struct {
		iface int
		data  []byte
	}{
		{0, arp},
		{ifSLL, sll2(etherIPv6, ipv6UDP(testPayload))},
		{0, ether(etherIPv4, ipv4UDP(testPayload))},
		{ifWifi, []byte{8, 0, 0, 0}},
	}
	for i, f := range frames {
		ci := gopacket.CaptureInfo{Timestamp: t0.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(f.data), Length: len(f.data), InterfaceIndex: f.iface}
		if err := w.WritePacket(ci, f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		frame int
		ipv6  bool
	}{{2, true}, {3, false}} {
		d, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if d.Frame != want.frame || d.IPv6 != want.ipv6 || d.Malformed != nil || !bytes.Equal(d.Payload, testPayload) {
			t.Errorf("got frame %d IPv6 %v Malformed %v, want frame %d", d.Frame, d.IPv6, d.Malformed, want.frame)
		}
		if wt := t0.Add(time.Duration(want.frame-1) * time.Microsecond); !d.Time.Equal(wt) {
			t.Errorf("frame %d: Time %v, want %v", d.Frame, d.Time, wt)
		}
	}
	if _, err := r.Next(); err == nil || !strings.Contains(err.Error(), "frame 4: unsupported link type 105") {
		t.Errorf("802.11 frame: %v", err)
	}
}

func TestGzip(t *testing.T) {
	path := filepath.Join(pcapDir, "rc_send_5000_ipv6.pcap")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(raw)
	zw.Close()
	want, _ := readAll(t, path)
	got := datagrams(t, z.Bytes())
	if len(got) != len(want) || len(got) == 0 {
		t.Fatalf("gzip: %d datagrams, plain: %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Frame != want[i].Frame || !bytes.Equal(got[i].IP, want[i].IP) {
			t.Errorf("datagram %d differs", i)
		}
	}
}

func TestWriteEthernetPcap(t *testing.T) {
	frames := goldenFrames(t, 1<<20)
	var buf bytes.Buffer
	if err := WriteEthernetPcap(&buf, frames); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		d, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		if !bytes.Equal(d.IP, frames[d.Frame-1][14:]) {
			t.Fatalf("frame %d: IP differs from the written frame", d.Frame)
		}
		if want := time.Unix(0, int64(d.Frame-1)*int64(time.Millisecond)); !d.Time.Equal(want) {
			t.Fatalf("frame %d: Time %v, want %v", d.Frame, d.Time, want)
		}
	}
	if r.Frames() != len(frames) || n != 751 { // 751: the RoCE packets in DECODE.txt
		t.Errorf("read back %d frames, %d datagrams; wrote %d frames", r.Frames(), n, len(frames))
	}
}

func TestClone(t *testing.T) {
	r, err := Open(filepath.Join(pcapDir, "ud_send_64.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	d, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	c := d.Clone()
	saved := append([]byte(nil), d.IP...)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(c.IP, saved) || !within(c.Payload, c.IP) || len(c.Payload) != len(d.Payload) {
		t.Errorf("clone changed by Next or Payload not within its IP")
	}
	if err := r.Close(); err != nil {
		t.Error(err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNoAllocs checks that Next allocates nothing per frame once the
// Reader's buffer has grown.
func TestNoAllocs(t *testing.T) {
	var frames [][]byte
	for range 4 {
		frames = append(frames, goldenFrames(t, 1<<20)...)
	}
	var buf bytes.Buffer
	if err := WriteEthernetPcap(&buf, frames); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Next", allocs)
	}
}
