package verbs

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestIdentityMatchesRxe derives the node GUID and GID table for guest A's
// MAC and address and compares them with what ibv_devinfo -v printed for
// rxe0 there (testdata/rxe/A-devinfo.txt).
func TestIdentityMatchesRxe(t *testing.T) {
	raw, err := os.ReadFile("../testdata/rxe/A-devinfo.txt")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	guid := regexp.MustCompile(`node_guid:\s+(\S+)`).FindStringSubmatch(text)[1]
	gids := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+([^,]+), RoCE v2`).FindAllStringSubmatch(text, -1)
	mac, _ := net.ParseMAC("52:54:00:12:00:02")
	addr := netip.MustParseAddr("198.18.0.2")
	g := nodeGUID(addr, mac)
	if got := formatGUID(g); got != guid {
		t.Errorf("node GUID %s, rxe %s", got, guid)
	}
	table := gidTable(addr, mac)
	if len(table) != len(gids) {
		t.Fatalf("GID table %v, rxe %v", table, gids)
	}
	for i, m := range gids {
		if table[i].String() != m[2] {
			t.Errorf("GID[%d] %v, rxe %s", i, table[i], m[2])
		}
	}
}

func formatGUID(g uint64) string {
	const hex = "0123456789abcdef"
	var b strings.Builder
	for i := range 16 {
		if i > 0 && i%4 == 0 {
			b.WriteByte(':')
		}
		b.WriteByte(hex[g>>(60-4*i)&0xf])
	}
	return b.String()
}

func TestActiveMTU(t *testing.T) {
	for _, tt := range []struct {
		ifMTU int
		want  MTU
	}{{1500, MTU1024}, {9000, MTU4096}, {65536, MTU4096}, {4176, MTU4096}, {4175, MTU2048}, {1100, MTU512}, {576, MTU256}, {300, MTU256}} {
		if got := ActiveMTU(tt.ifMTU); got != tt.want {
			t.Errorf("ActiveMTU(%d) = %v, want %v", tt.ifMTU, got, tt.want)
		}
	}
}

func TestDeviceAttributes(t *testing.T) {
	d, err := Open(Config{Addr: netip.MustParseAddr("127.0.3.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if p := d.QueryPort(); p.State != PortActive || p.ActiveMTU != MTU4096 || p.MaxMTU != MTU4096 || p.GIDTblLen != 1024 || p.LinkLayer != "Ethernet" {
		t.Errorf("port %+v (loopback's MTU 65536 gives 4096)", p)
	}
	a := d.QueryDevice()
	if a.MaxMsgSize != 1<<31 || a.MaxQPRdAtom != 128 || a.MaxSGE != 32 || a.PhysPortCnt != 1 || a.NodeGUID == 0 {
		t.Errorf("device attributes %+v", a)
	}
	i := d.GIDIndex()
	if g, err := d.QueryGID(i); err != nil || g.String() != "::ffff:127.0.3.1" || g.Addr() != netip.MustParseAddr("127.0.3.1") {
		t.Errorf("GID[%d] = %v, %v", i, g, err)
	}
	if _, err := d.QueryGID(7); err == nil {
		t.Error("QueryGID(7) succeeded")
	}
	// A second device on the same address and port is refused.
	if d2, err := Open(Config{Addr: netip.MustParseAddr("127.0.3.1")}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second device on the same address: %v", err)
		if d2 != nil {
			d2.Close()
		}
	}
	if _, err := Open(Config{}); err == nil {
		t.Error("Open without an address succeeded")
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := d.AllocPD(); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocPD after Close: %v", err)
	}
}
