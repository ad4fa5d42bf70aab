package perftest

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/goroce/goroce/internal/golden"
	"github.com/goroce/goroce/verbs"
)

// segment is one TCP payload of a recorded out-of-band exchange.
type segment struct {
	fromClient bool
	data       []byte
}

const pcapDir = "../../testdata/pcaps"

// oobStream returns the perftest exchange (TCP port 18515) of a golden
// capture, in capture order.
func oobStream(t testing.TB, name string) []segment {
	t.Helper()
	frames, err := golden.Frames(name)
	if err != nil {
		t.Fatal(err)
	}
	var segs []segment
	for _, pkt := range frames {
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || len(tcp.Payload) == 0 || (tcp.DstPort != 18515 && tcp.SrcPort != 18515) {
			continue
		}
		segs = append(segs, segment{tcp.DstPort == 18515, bytes.Clone(tcp.Payload)})
	}
	if len(segs) == 0 {
		t.Fatalf("%s: no perftest exchange", name)
	}
	return segs
}

// recordedArgs returns the command line a golden output file starts with
// ("# ib_write_bw -d rxe0 -i 1 -x $(gid-index) -F -n 5 -s 64 198.18.0.3"),
// without the rxe device, GID index and host, which name the guests.
func recordedArgs(t testing.TB, file string) (Test, []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pcapDir, file))
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	line = regexp.MustCompile(`-x \$\([^)]*\)|-d \S+|198\.18\.\S+`).ReplaceAllString(strings.TrimPrefix(line, "# "), "")
	f := strings.Fields(line)
	test, ok := Tools[f[0]]
	if !ok {
		t.Fatalf("%s: %q is not a perftest tool", file, f[0])
	}
	return test, f[1:]
}

// fakePlane stands in for the RDMA side: the exchange tests check only
// what goes over TCP.
type fakePlane struct {
	p   *Params
	rem []Dest
}

func (f *fakePlane) local() []Dest {
	d := make([]Dest, f.p.QPs)
	for i := range d {
		d[i] = Dest{OutReads: 1, QPN: 0x11 + uint32(i), PSN: 0x123456, RKey: 0xabcdef01, VAddr: 0x7f0000001000,
			GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1"))}
	}
	return d
}
func (f *fakePlane) setRemote(d []Dest)            { f.rem = d }
func (f *fakePlane) connect() error                { return nil }
func (f *fakePlane) prepare() error                { return nil }
func (f *fakePlane) close()                        {}
func (f *fakePlane) serve(wait func() error) error { return wait() }
func (f *fakePlane) times(size int) *bwTimes {
	n := f.p.Iters * f.p.QPs
	t := &bwTimes{size: size, iters: n, cqMod: f.p.CQMod, postList: f.p.PostList, posted: make([]int64, n), completed: make([]int64, n)}
	for i := range n {
		t.posted[i], t.completed[i] = int64(i)*1000, int64(i)*1000+5000
	}
	return t
}
func (f *fakePlane) bwClient(size int) (*bwTimes, error) { return f.times(size), nil }
func (f *fakePlane) bwServer(size int) (*bwTimes, error) {
	t := f.times(size)
	t.noPeak, t.completed[0] = true, t.completed[len(t.completed)-1]
	return t, nil
}
func (f *fakePlane) latency(int) ([]int64, int, int64, error) {
	posted := make([]int64, f.p.Iters)
	for i := range posted {
		posted[i] = int64(i) * 20000
	}
	return posted, len(posted), 0, nil
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-acc
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestExchangeGolden plays each side of every recorded perftest exchange
// against goroce's, in both roles: goroce must send messages of the same
// sizes in the same order, byte for byte where they do not depend on the
// run (version, system data, MTU, report sizes and counts, "done"), and
// QP records the other side parses.
func TestExchangeGolden(t *testing.T) {
	for _, name := range []string{"rc_write_64", "rc_write_5000", "rc_write_10000_mtu4096", "rc_write_64_ipv6",
		"rc_read_64", "rc_read_5000", "rc_read_10000_mtu4096", "rc_send_64", "rc_send_5000", "rc_send_5000_ipv6",
		"rc_send_10000_mtu4096", "rc_atomic_fadd", "rc_atomic_cmpswap", "rc_write_lat_64",
		"uc_send_5000", "uc_write_5000", "uc_write_10000_mtu4096", "ud_send_64", "ud_send_1000"} {
		segs := oobStream(t, name)
		for _, client := range []bool{true, false} {
			role := map[bool]string{true: "client", false: "server"}[client]
			t.Run(name+"/"+role, func(t *testing.T) {
				test, args := recordedArgs(t, name+"."+role+".txt")
				if client {
					args = append(args, "peer")
				}
				p, err := Parse(test, args)
				if err != nil {
					t.Fatal(err)
				}
				ours, peer := tcpPair(t)
				if !client {
					ours, peer = peer, ours
				}
				var out bytes.Buffer
				done := make(chan error, 1)
				mtu := 3 // 1024, rxe's on a 1500-byte link
				if strings.Contains(name, "mtu4096") {
					mtu = 5
				}
				go func() {
					done <- session(p, NewConn(ours, client), mtu, "goroce_test", &out, func(int) (plane, int, error) {
						return &fakePlane{p: p}, 1, nil
					})
				}()
				replay(t, peer, segs, client)
				peer.Close()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("session: %v\n%s", err, out.String())
					}
				case <-time.After(10 * time.Second):
					t.Fatal("session did not end")
				}
				checkOutput(t, p, out.String(), client)
			})
		}
	}
}

// replay writes the peer's recorded segments and reads ours, checking
// each against the recording.
func replay(t *testing.T, peer net.Conn, segs []segment, weAreClient bool) {
	t.Helper()
	peer.SetDeadline(time.Now().Add(10 * time.Second))
	reports := 0
	for i, s := range segs {
		if s.fromClient != weAreClient {
			if _, err := peer.Write(s.data); err != nil {
				t.Fatalf("segment %d: write: %v", i, err)
			}
			continue
		}
		got := make([]byte, len(s.data))
		if _, err := io.ReadFull(peer, got); err != nil {
			t.Fatalf("segment %d: want %d bytes (%q): %v", i, len(s.data), s.data, err)
		}
		switch len(s.data) {
		case recordLen:
			if _, err := ParseDest(got); err != nil {
				t.Fatalf("segment %d: %v", i, err)
			}
		case 8: // size, iters, then three doubles that depend on the run
			// perftest's RDMA servers send an uninitialised report; only
			// the client's is defined.
			if weAreClient && reports%5 < 2 && !bytes.Equal(got, s.data) {
				t.Errorf("segment %d (report field %d): got %d, want %d", i, reports%5,
					binary.BigEndian.Uint64(got), binary.BigEndian.Uint64(s.data))
			}
			reports++
		default: // version, system data, MTU, "done"
			if !bytes.Equal(got, s.data) {
				t.Errorf("segment %d: got %q, want %q", i, got, s.data)
			}
		}
	}
	// Nothing more from our side.
	peer.SetReadDeadline(time.Now().Add(2 * time.Second))
	if extra, _ := io.ReadAll(peer); len(extra) > 0 {
		t.Errorf("%d bytes after the recorded exchange: %q", len(extra), extra)
	}
}

// checkOutput checks the printed report's shape: the header, and a table
// whose rows parse.
func checkOutput(t *testing.T, p *Params, out string, client bool) {
	t.Helper()
	if !strings.Contains(out, " Data ex. method : Ethernet\n") || !strings.Contains(out, " local address: LID 0000 QPN 0x0011 PSN 0x123456") {
		t.Errorf("no header or address lines:\n%s", out)
	}
	hdr := resultFmt
	if p.Kind == Lat {
		hdr = resultFmtLat
	}
	if (p.Verb == Read || p.Verb == Atomic) && p.Kind == Lat && !client {
		return // the server of a read or atomic latency test prints no table
	}
	i := strings.Index(out, hdr+"\n")
	if i < 0 {
		t.Fatalf("no table header:\n%s", out)
	}
	row, _, _ := strings.Cut(out[i+len(hdr)+1:], "\n")
	f := strings.Fields(row)
	if want := map[Kind]int{BW: 5, Lat: 9}[p.Kind]; len(f) != want {
		t.Errorf("row %q: %d fields, want %d", row, len(f), want)
	}
}

// TestWriteLatServerSpeaksFirst: in the recorded ib_write_lat between two
// rxe hosts, the first RDMA WRITE comes from the server (198.18.0.3). A
// goroce whose client spoke first waited forever for real perftest, which
// waits for the server (found by make interop).
func TestWriteLatServerSpeaksFirst(t *testing.T) {
	frames, err := golden.Frames("rc_write_lat_64")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkt := range frames {
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if udp == nil || ip == nil || udp.DstPort != 4791 || len(udp.Payload) < 1 {
			continue
		}
		if op := udp.Payload[0]; op != 0x0a { // RC RDMA_WRITE_ONLY
			t.Fatalf("first RoCE packet has opcode %#x, want RDMA_WRITE_ONLY", op)
		}
		server := ip.SrcIP.String() == "198.18.0.3"
		if !server {
			t.Fatalf("the first WRITE came from %v, the client", ip.SrcIP)
		}
		if !speaksFirst(Write, false) || speaksFirst(Write, true) {
			t.Fatal("goroce's ib_write_lat must let the server speak first")
		}
		return
	}
	t.Fatal("no RoCE packet in the capture")
}
