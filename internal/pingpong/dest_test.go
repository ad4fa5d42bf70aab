package pingpong

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/goroce/goroce/internal/golden"
	"github.com/goroce/goroce/internal/wire"
	"github.com/goroce/goroce/verbs"
)

func gid(s string) verbs.GID { return verbs.GIDFromAddr(netip.MustParseAddr(s)) }

// The client's message in testdata/pcaps/rc_pingpong_64.pcap, sent by
// rdma-core's ibv_rc_pingpong on rxe.
const goldenMsg = "0000:000025:426f46:00000000000000000000ffffc6120002\x00"

func TestMarshalGolden(t *testing.T) {
	d := dest{LID: 0, QPN: 0x25, PSN: 0x426f46, GID: gid("::ffff:198.18.0.2")}
	m := d.marshal()
	if got := string(m[:]); got != goldenMsg {
		t.Fatalf("marshal = %q, want %q", got, goldenMsg)
	}
	if len(m) != len("0000:000000:000000:00000000000000000000000000000000")+1 {
		t.Fatalf("message is %d bytes, want sizeof the template", len(m))
	}
	const line = "LID 0x0000, QPN 0x000025, PSN 0x426f46, GID ::ffff:198.18.0.2"
	if got := d.String(); got != line {
		t.Fatalf("String = %q, want %q", got, line)
	}
}

func TestDestRoundTrip(t *testing.T) {
	for _, d := range []dest{
		{},
		{LID: 0xffff, QPN: 0xffffff, PSN: 0xffffff, GID: gid("fe80::1234:56ff:fe78:9abc")},
		{LID: 0x12, QPN: 0x11, PSN: 0x000001, GID: gid("::ffff:127.0.0.2")},
		{LID: 0, QPN: 0xabcdef, PSN: 0x7f0005, GID: gid("2001:db8::1")},
	} {
		m := d.marshal()
		got, err := parseDest(m[:])
		if err != nil || got != d {
			t.Errorf("parseDest(marshal(%+v)) = %+v, %v", d, got, err)
		}
	}
}

func TestParseDestErrors(t *testing.T) {
	for _, tc := range []struct{ name, msg string }{
		{"short", goldenMsg[:51]},
		{"no NUL", goldenMsg[:51] + "x"},
		{"long", goldenMsg + "\x00"},
		{"bad LID", "000g:000025:426f46:00000000000000000000ffffc6120002\x00"},
		{"bad QPN", "0000:00002x:426f46:00000000000000000000ffffc6120002\x00"},
		{"missing colon", "0000:000025-426f46:00000000000000000000ffffc6120002\x00"},
		{"bad GID", "0000:000025:426f46:00000000000000000000ffffc612000z\x00"},
		{"done", "done\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := parseDest([]byte(tc.msg)); !errors.Is(err, errMsg) {
				t.Fatalf("parseDest(%q) = %+v, %v; want an errMsg", tc.msg, d, err)
			}
		})
	}
	// sscanf's %x takes upper case too.
	d, err := parseDest([]byte(strings.ToUpper(goldenMsg)))
	if err != nil || d.QPN != 0x25 || d.PSN != 0x426f46 || d.GID != gid("::ffff:198.18.0.2") {
		t.Fatalf("upper case: %+v, %v", d, err)
	}
}

func FuzzParseDest(f *testing.F) {
	f.Add([]byte(goldenMsg))
	f.Add([]byte("ffff:ffffff:ffffff:FE800000000000000000000000000001\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDest(b)
		if err != nil {
			return
		}
		m := d.marshal()
		if !strings.EqualFold(string(m[:]), string(b)) {
			t.Fatalf("marshal(parseDest(%q)) = %q", b, m[:])
		}
		if d2, err := parseDest(m[:]); err != nil || d2 != d {
			t.Fatalf("round trip of %q: %+v, %v; want %+v", b, d2, err, d)
		}
	})
}

// TestPcapExchange checks the TCP payloads of real runs of
// ibv_rc_pingpong and ibv_ud_pingpong (-n 5 -s 64 between 198.18.0.2, the
// client, and 198.18.0.3) against what marshal produces for the addresses
// the tools printed: ud_pingpong sends the same message as rc_pingpong.
func TestPcapExchange(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind Kind
	}{{"rc_pingpong_64", verbs.QPTypeRC}, {"ud_pingpong_64", verbs.QPTypeUD}} {
		t.Run(tc.name, func(t *testing.T) {
			fromClient, fromServer, _ := readPcap(t, tc.name)
			client, server := readOutputs(t, tc.name, tc.kind)
			wantC, wantS := client[0].marshal(), server[0].marshal()
			if got, want := bytes.Join(fromClient, nil), append(wantC[:], doneMsg...); !bytes.Equal(got, want) {
				t.Errorf("client sent %q, want %q", got, want)
			}
			if got := bytes.Join(fromServer, nil); !bytes.Equal(got, wantS[:]) {
				t.Errorf("server sent %q, want %q", got, wantS[:])
			}
			if len(fromClient) != 2 || len(fromServer) != 1 {
				t.Errorf("segments: client %d, server %d; want 2 (address, done) and 1", len(fromClient), len(fromServer))
			}
		})
	}
}

// TestPcapUDPingpong checks the datagrams of the real ibv_ud_pingpong run
// against the addresses the tools exchanged, which is what ud_pingpong
// builds its work requests from: each side sends SEND_ONLY datagrams to
// the peer's exchanged QPN with the Q_Key 0x11111111 and its own QPN in
// the DETH, PSNs counting up from the PSN it printed, 64 bytes each,
// taking turns with the client first.
func TestPcapUDPingpong(t *testing.T) {
	_, _, roce := readPcap(t, "ud_pingpong_64")
	client, server := readOutputs(t, "ud_pingpong_64", verbs.QPTypeUD)
	if len(roce) != 10 {
		t.Fatalf("%d RoCE packets, want 10 (5 round trips)", len(roce))
	}
	for i, pkt := range roce {
		from, to := client, server
		if i%2 == 1 {
			from, to = server, client
		}
		bth, deth := wire.BTH(pkt.b), wire.DETH(pkt.b[wire.BTHLen:])
		if got, want := pkt.src, ntop6(from[0].GID); "::ffff:"+got != want {
			t.Errorf("packet %d from %s, want %s", i, got, want)
		}
		if op := bth.Opcode(); op.Transport() != wire.UD || op.Op() != wire.OpSendOnly || bth.DestQP() != to[0].QPN || bth.PSN() != (from[0].PSN+uint32(i/2))&0xffffff {
			t.Errorf("packet %d: %v to QP %#x PSN %#x; want UD SEND_ONLY to %#x PSN %#x",
				i, bth.Opcode(), bth.DestQP(), bth.PSN(), to[0].QPN, from[0].PSN+uint32(i/2))
		}
		if deth.QKey() != udQKey || deth.SrcQP() != from[0].QPN {
			t.Errorf("packet %d: Q_Key %#x from QP %#x; want %#x from %#x", i, deth.QKey(), deth.SrcQP(), udQKey, from[0].QPN)
		}
		if n := len(pkt.b) - wire.BTHLen - wire.DETHLen - wire.ICRCLen; n != 64 {
			t.Errorf("packet %d: %d payload bytes, want 64", i, n)
		}
	}
}

// rocePacket is the UDP payload of a RoCEv2 packet and its IPv4 source.
type rocePacket struct {
	b   []byte
	src string
}

// readPcap returns the TCP payloads the client and the server of a
// recorded pingpong run sent, in order, and its RoCEv2 packets.
func readPcap(t *testing.T, name string) (fromClient, fromServer [][]byte, roce []rocePacket) {
	t.Helper()
	frames, err := golden.Frames(name)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkt := range frames {
		if udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP); udp != nil && udp.DstPort == 4791 {
			ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
			if ip == nil {
				t.Fatalf("%s: a RoCEv2 packet without an IPv4 header", name)
			}
			roce = append(roce, rocePacket{udp.Payload, ip.SrcIP.String()})
			continue
		}
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || len(tcp.Payload) == 0 {
			continue
		}
		switch 18515 {
		case int(tcp.DstPort):
			fromClient = append(fromClient, tcp.Payload)
		case int(tcp.SrcPort):
			fromServer = append(fromServer, tcp.Payload)
		}
	}
	return fromClient, fromServer, roce
}

// readOutputs reads the addresses the client and the server of a
// recorded run printed, [local, remote] each, and checks that they mirror.
func readOutputs(t *testing.T, name string, kind Kind) (client, server [2]dest) {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "pcaps")
	client = readAddresses(t, filepath.Join(dir, name+".client.txt"), kind)
	server = readAddresses(t, filepath.Join(dir, name+".server.txt"), kind)
	if client[0] != server[1] || client[1] != server[0] {
		t.Fatalf("client printed %+v, server %+v: they should mirror", client, server)
	}
	return client, server
}

// readAddresses parses the local and remote address lines a real tool
// printed, checking that goroce formats each line the same way.
func readAddresses(t *testing.T, path string, kind Kind) [2]dest {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]dest
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		for i, label := range []string{"  local address:  ", "  remote address: "} {
			rest, ok := strings.CutPrefix(line, label)
			if !ok {
				continue
			}
			d, _, err := parseAddressLine(rest)
			if err != nil {
				t.Fatalf("%s: %q: %v", path, line, err)
			}
			got := label + d.String()
			if i == 0 && kind == verbs.QPTypeUD {
				got = label + d.udLocalString()
			}
			if got != line {
				t.Errorf("%s: formatted %q, tool printed %q", path, got, line)
			}
			out[i] = d
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%s: found %d address lines, want 2", path, n)
	}
	return out
}

func TestNtop6(t *testing.T) {
	// Outputs of glibc's inet_ntop(AF_INET6).
	for _, tc := range []struct{ in, want string }{
		{"::ffff:198.18.0.2", "::ffff:198.18.0.2"},
		{"::", "::"},
		{"::1", "::1"},
		{"::2", "::2"},
		{"::c612:2", "::198.18.0.2"},
		{"::0.1.0.2", "::0.1.0.2"},
		{"::ffff:0:0", "::ffff:0.0.0.0"},
		{"::ffff:1:2", "::ffff:0.1.0.2"},
		{"1::ffff:1.2.3.4", "1::ffff:102:304"},
		{"1:0:0:1:0:0:0:1", "1:0:0:1::1"},
		{"1:0:1:0:1:0:1:0", "1:0:1:0:1:0:1:0"},
		{"fe80:0:0:0:200:0:0:0", "fe80::200:0:0:0"},
		{"0:0:0:1:0:0:0:0", "0:0:0:1::"},
		{"0:0:0:0:1:0:0:0", "::1:0:0:0"},
		{"0:0:0:0:0:1:0:1", "::1:0:1"},
		{"fe80::1", "fe80::1"},
		{"2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"},
	} {
		if got := ntop6(gid(tc.in)); got != tc.want {
			t.Errorf("ntop6(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Outside the IPv4-compatible form, glibc and Go agree.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		var g verbs.GID
		for i := range 8 {
			if r.IntN(2) == 0 {
				g[2*i], g[2*i+1] = byte(r.IntN(256)), byte(r.IntN(256))
			}
		}
		a := netip.AddrFrom16(g)
		if [12]byte(g[:12]) == [12]byte{} {
			continue
		}
		if got, want := ntop6(g), a.String(); got != want {
			t.Fatalf("ntop6(%x) = %q, netip says %q", g, got, want)
		}
	}
}

func TestRand48(t *testing.T) {
	// srand48(seed); lrand48() & 0xffffff, three times, from glibc.
	for _, tc := range []struct {
		seed int64
		want [3]uint32
	}{
		{0, [3]uint32{0xddb16e, 0xfcc9c0, 0x55e80a}},
		{1, [3]uint32{0x5424a4, 0x2ccef5, 0xdb4a65}},
		{12345, [3]uint32{0xd79090, 0xa7ca71, 0x79c631}},
		{-7, [3]uint32{0xa08af0, 0xaca551, 0xb03791}},
		{12000000000, [3]uint32{0x35bd6e, 0x41e5c0, 0xead40a}},
	} {
		r := newRand48(tc.seed)
		var got [3]uint32
		for i := range got {
			got[i] = r.lrand48() & 0xffffff
		}
		if got != tc.want {
			t.Errorf("seed %d: %06x, want %06x", tc.seed, got, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	// The result lines of testdata/pcaps/rc_pingpong_64.{client,server}.txt:
	// 5 iterations of 64 bytes in 18123 and 24337 µs.
	for _, tc := range []struct {
		usec int64
		want string
	}{
		{18123, "640 bytes in 0.02 seconds = 0.28 Mbit/sec\n5 iters in 0.02 seconds = 3624.60 usec/iter\n"},
		{24337, "640 bytes in 0.02 seconds = 0.21 Mbit/sec\n5 iters in 0.02 seconds = 4867.40 usec/iter\n"},
	} {
		if got := report(time.Duration(tc.usec)*time.Microsecond, 64, 5); got != tc.want {
			t.Errorf("report(%d µs) = %q, want %q", tc.usec, got, tc.want)
		}
	}
	if got := report(0, 64, 0); got != "0 bytes in 0.00 seconds = -nan Mbit/sec\n0 iters in 0.00 seconds = -nan usec/iter\n" {
		t.Errorf("report of nothing = %q", got)
	}
}
