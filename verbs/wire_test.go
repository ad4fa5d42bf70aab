package verbs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/capture"
	"github.com/goroce/goroce/internal/golden"
	"github.com/goroce/goroce/internal/wire"
)

// startCapture runs tcpdump on loopback for UDP port 4791 traffic of the
// given hosts. It skips the test when tcpdump or the privilege is missing.
// A test that ends before it calls stop (a failure) stops tcpdump in its
// cleanup: a capture left running on lo slowed every loopback datagram
// after it, for every process, about twofold.
func startCapture(t *testing.T, hosts ...string) (stop func() string) {
	t.Helper()
	bin, err := exec.LookPath("tcpdump")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and tcpdump (CI installs it) to capture loopback traffic")
	}
	path := filepath.Join(t.TempDir(), "own.pcap")
	filter := "udp port 4791 and (host " + strings.Join(hosts, " or host ") + ")"
	cmd := exec.Command(bin, "-i", "lo", "-U", "--immediate-mode", "-w", path, filter)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("tcpdump: %v", err)
	}
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Skip("tcpdump did not start listening")
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		})
	}
	t.Cleanup(end)
	return func() string {
		time.Sleep(100 * time.Millisecond)
		end()
		return path
	}
}

// exchange is one operation's packets: (direction, opcode, AckReq, payload
// length) — the part of the wire behaviour the golden captures pin down.
type exchange []string

func packetsOf(t *testing.T, path string, requester string) exchange {
	t.Helper()
	r, err := capture.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var ex exchange
	var p wire.Packet
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return ex
		}
		if err != nil {
			t.Fatal(err)
		}
		if d.DstPort != wire.UDPPort {
			continue
		}
		if d.Malformed != nil {
			t.Fatalf("%s frame %d: %v", path, d.Frame, d.Malformed)
		}
		// A GSO super-packet travels whole on loopback: check and list
		// the packets it carries, as the kernel would segment it.
		for _, d := range capture.SplitGSO(d) {
			computed, stored, err := wire.ICRCOfIP(d.IP)
			if err != nil || computed != stored {
				t.Errorf("%s frame %d: ICRC %08x, stored %08x (%v)", path, d.Frame, computed, stored, err)
			}
			if err := p.Parse(d.Payload); err != nil {
				t.Fatalf("%s frame %d: %v", path, d.Frame, err)
			}
			dir := "→"
			if d.Src.String() != requester {
				dir = "←"
			}
			e := fmt.Sprintf("%s %v ackreq=%v len=%d", dir, p.BTH.Opcode(), p.BTH.AckReq(), len(p.Payload))
			if p.DETH != nil {
				e += fmt.Sprintf(" qkey=%#x", p.DETH.QKey())
			}
			ex = append(ex, e)
		}
	}
}

// goldenExchange returns the packets of the first message of a golden
// capture: requests up to and including the first with AckReq, and the
// responses to them.
func goldenExchange(t *testing.T, file string) exchange {
	t.Helper()
	dir, err := golden.Dir()
	if err != nil {
		t.Fatal(err)
	}
	all := packetsOf(t, filepath.Join(dir, file), "198.18.0.2")
	return firstMessage(all)
}

// firstMessage keeps the first request message and what answers it.
func firstMessage(all exchange) exchange {
	var out exchange
	done := false
	for _, e := range all {
		req := strings.HasPrefix(e, "→")
		switch {
		case req && !done:
			out = append(out, e)
			done = strings.Contains(e, "ackreq=true")
		case !req:
			out = append(out, e)
			if strings.Contains(e, "ACKNOWLEDGE") || strings.Contains(e, "RESPONSE_LAST") || strings.Contains(e, "RESPONSE_ONLY") {
				return out
			}
		}
	}
	return out
}

// TestWireMatchesRxe captures goroce's own UDP traffic for the operations
// of the golden captures (MTU 1024, 5000-byte messages, 8-byte atomics),
// checks every ICRC, and compares each operation's packet sequence with
// the one Linux rxe sent. The devices frame WRITEs as rxe does
// (Config.WholeWrites); TestWireSplitWrites checks goroce's own framing.
func TestWireMatchesRxe(t *testing.T) {
	tests := []struct {
		golden string
		wr     func(a, b *endpoint) SendWR
	}{
		{"rc_write_5000.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"rc_read_5000.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRRDMARead, SGL: []SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"rc_send_5000.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 5000)}}
		}},
		{"rc_write_64.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"rc_atomic_fadd.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRAtomicFetchAndAdd, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 1}
		}},
		{"rc_atomic_cmpswap.pcap", func(a, b *endpoint) SendWR {
			return SendWR{Opcode: WRAtomicCmpAndSwp, SGL: []SGE{a.mr.SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.golden, ".pcap"), func(t *testing.T) {
			want := goldenExchange(t, tt.golden)
			if len(want) < 2 {
				t.Fatalf("golden exchange of %s has %d packets", tt.golden, len(want))
			}
			ha, hb := sameHostAddrs()
			da, db := openPair(t, Config{Addr: ha, WholeWrites: true}, Config{Addr: hb, WholeWrites: true})
			stop := startCapture(t, da.Addr().Addr().String(), db.Addr().Addr().String())
			a, b := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
			connect(t, a, b, MTU1024)
			_, err := b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 8192)}}})
			must(t, err)
			wr := tt.wr(a, b)
			wr.Flags = SendSignaled
			_, err = a.qp.PostSend([]SendWR{wr})
			must(t, err)
			if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
				t.Fatalf("WC %+v", wc)
			}
			time.Sleep(20 * time.Millisecond) // let the last ACK reach the capture
			got := firstMessage(packetsOf(t, stop(), da.Addr().Addr().String()))
			t.Logf("%d packets:\n  %s", len(got), strings.Join(got, "\n  "))
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("goroce sent\n  %s\nrxe sent\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// TestWireSplitWrites captures what goroce sends over UDP for an RC RDMA
// WRITE of 5000 bytes at MTU 1024 with its own framing (Config.WholeWrites
// off): five RDMA WRITE ONLY packets with correct ICRCs, each with a RETH
// for its own bytes, AckReq on the last, in fewer datagrams than packets
// (the point of the framing: one size, one UDP_SEGMENT run); the peer, with
// every packet a WRITE of its own, acknowledges the last.
func TestWireSplitWrites(t *testing.T) {
	da, db := newUDPDevices(t)
	stop := startCapture(t, da.Addr().Addr().String(), db.Addr().Addr().String())
	a, b := newEndpoint(t, da, 1<<16), newEndpoint(t, db, 1<<16)
	connect(t, a, b, MTU1024)
	fill(a.buf[:5000], 3)
	_, err := a.qp.PostSend([]SendWR{{Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{a.mr.SGE(0, 5000)},
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}})
	must(t, err)
	if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
		t.Fatalf("WC %+v", wc)
	}
	time.Sleep(20 * time.Millisecond)
	path := stop()
	got := packetsOf(t, path, da.Addr().Addr().String())
	want := exchange{
		"→ RC_RDMA_WRITE_ONLY ackreq=false len=1024", "→ RC_RDMA_WRITE_ONLY ackreq=false len=1024",
		"→ RC_RDMA_WRITE_ONLY ackreq=false len=1024", "→ RC_RDMA_WRITE_ONLY ackreq=false len=1024",
		"→ RC_RDMA_WRITE_ONLY ackreq=true len=904", "← RC_ACKNOWLEDGE ackreq=false len=0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("goroce sent\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	// The RETHs, and the datagrams they went in.
	r, err := capture.Open(path)
	must(t, err)
	defer r.Close()
	var p wire.Packet
	datagrams, k := 0, 0
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(t, err)
		if d.DstPort != wire.UDPPort || d.Src.String() != da.Addr().Addr().String() {
			continue
		}
		datagrams++
		for _, d := range capture.SplitGSO(d) {
			must(t, p.Parse(d.Payload))
			va, n := b.mr.Addr()+8+uint64(k*1024), min(5000-k*1024, 1024)
			if p.RETH == nil || p.RETH.VA() != va || p.RETH.RKey() != b.mr.RKey() || int(p.RETH.DMALen()) != n {
				t.Errorf("packet %d: RETH %v, want VA %#x, R_Key %#x, length %d", k, p.RETH, va, b.mr.RKey(), n)
			}
			k++
		}
	}
	if datagrams >= k {
		t.Errorf("%d packets in %d datagrams: not segmented", k, datagrams)
	}
	t.Logf("%d packets in %d datagrams", k, datagrams)
	// The count orders the reads below after the placements it counts.
	if n, m := b.mr.RemoteWriteBytes(), b.mr.RemoteWrites(); n != 5000 || m != 5 {
		t.Fatalf("RemoteWriteBytes %d, RemoteWrites %d; want 5000 and 5", n, m)
	}
	if !bytes.Equal(b.buf[8:5008], a.buf[:5000]) {
		t.Error("target differs from source")
	}
}

// firstRequest keeps the packets of the first request message: from the
// first FIRST or ONLY to the first LAST or ONLY (UC and UD have no
// responses and never set AckReq).
func firstRequest(all exchange) exchange {
	var out exchange
	for _, e := range all {
		if !strings.HasPrefix(e, "→") {
			continue
		}
		if len(out) == 0 && !strings.Contains(e, "_FIRST") && !strings.Contains(e, "_ONLY") {
			continue
		}
		out = append(out, e)
		if strings.Contains(e, "_LAST") || strings.Contains(e, "_ONLY") {
			return out
		}
	}
	return out
}

// TestWireMatchesRxeUnreliable is TestWireMatchesRxe for UC and UD: the
// packets goroce sends for one message, with their ICRCs, against the
// first message of the golden rxe captures (perftest's UD Q_Key is
// 0x11111111).
func TestWireMatchesRxeUnreliable(t *testing.T) {
	tests := []struct {
		golden string
		typ    QPType
		mtu    MTU
		wr     func(a, b *endpoint, ah *AH) SendWR
	}{
		{"ud_send_64.pcap", QPTypeUD, MTU1024, func(a, b *endpoint, ah *AH) SendWR {
			return SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 64)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey}
		}},
		{"ud_send_1000.pcap", QPTypeUD, MTU1024, func(a, b *endpoint, ah *AH) SendWR {
			return SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 1000)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: testQKey}
		}},
		{"uc_send_5000.pcap", QPTypeUC, MTU1024, func(a, b *endpoint, _ *AH) SendWR {
			return SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 5000)}}
		}},
		{"uc_write_5000.pcap", QPTypeUC, MTU1024, func(a, b *endpoint, _ *AH) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 5000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
		{"uc_write_10000_mtu4096.pcap", QPTypeUC, MTU4096, func(a, b *endpoint, _ *AH) SendWR {
			return SendWR{Opcode: WRRDMAWrite, SGL: []SGE{a.mr.SGE(0, 10000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimSuffix(tt.golden, ".pcap"), func(t *testing.T) {
			dir, err := golden.Dir()
			if err != nil {
				t.Fatal(err)
			}
			want := firstRequest(packetsOf(t, filepath.Join(dir, tt.golden), "198.18.0.2"))
			if len(want) < 1 {
				t.Fatalf("no request message in %s", tt.golden)
			}
			da, db := newUDPDevices(t)
			stop := startCapture(t, da.Addr().Addr().String(), db.Addr().Addr().String())
			a, b := newTypedEndpoint(t, da, tt.typ, 1<<16), newTypedEndpoint(t, db, tt.typ, 1<<16)
			var ah *AH
			if tt.typ == QPTypeUD {
				udUp(t, a.qp, testQKey)
				udUp(t, b.qp, testQKey)
				ah = createAH(t, a, db.Addr().Addr())
			} else {
				ucConnect(t, a, b, tt.mtu, 0x10, 0x20)
			}
			_, err = b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{b.mr.SGE(0, 16384)}}})
			must(t, err)
			wr := tt.wr(a, b, ah)
			wr.Flags = SendSignaled
			_, err = a.qp.PostSend([]SendWR{wr})
			must(t, err)
			if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
				t.Fatalf("WC %+v", wc)
			}
			if wr.Opcode == WRSend {
				wait(t, b.cq, 1)
			}
			time.Sleep(20 * time.Millisecond)
			got := firstRequest(packetsOf(t, stop(), da.Addr().Addr().String()))
			t.Logf("%d packets:\n  %s", len(got), strings.Join(got, "\n  "))
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("goroce sent\n  %s\nrxe sent\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}
