package netns_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/netns"
)

// The two ends of the veth pair.
const (
	addrA = "198.18.10.1"
	addrB = "198.18.10.2"
)

// requireTools skips the test unless it runs as root with ip and nft, and
// returns their paths.
func requireTools(t testing.TB) (ip, nft string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces: run sudo go test -v ./test/netns")
	}
	ip, err := netns.Tool("ip")
	if err != nil {
		t.Skipf("needs iproute2 (apt-get install iproute2): %v", err)
	}
	nft, err = netns.Tool("nft")
	if err != nil {
		t.Skipf("needs nftables (apt-get install nftables): %v", err)
	}
	return ip, nft
}

// command runs a short administrative command and returns its output,
// failing the test if it fails.
func command(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := tryCommand(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryCommand runs a command with a timeout; its error includes the output.
func tryCommand(name string, args ...string) (string, error) {
	return tryCommandIn(name, "", args...)
}

// tryCommandIn is tryCommand with stdin.
func tryCommandIn(name, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// topology is two network namespaces joined by a veth pair: addrA in a,
// addrB in b.
type topology struct {
	ip, nft    string // the tools' paths
	a, b       string // namespace names
	devA, devB string // the veth's ends in a and b
}

// topologies numbers the bridges of this test process (newBridge).
var topologies atomic.Int32

// newTopology creates the namespaces and the veth pair (netns.NewVeth:
// goroce-t-<pid>-<n>-a and -b, the veth created inside them), with the
// given MTU on both ends, and deletes them when the test ends, which takes
// the veth pair with them.
func newTopology(t testing.TB, mtu int) *topology {
	t.Helper()
	ip, nft := requireTools(t)
	v, err := netns.NewVeth("goroce-t", netip.MustParsePrefix(addrA+"/24"), netip.MustParsePrefix(addrB+"/24"), mtu)
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, "ermission") || strings.Contains(msg, "not permitted") {
			t.Skipf("cannot create a network namespace (a container without CAP_SYS_ADMIN?): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := v.Close(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return &topology{ip: ip, nft: nft, a: filepath.Base(v.NSA.Name()), b: filepath.Base(v.NSB.Name()), devA: v.DevA, devB: v.DevB}
}

// segmentOnWire makes both veth ends segment UDP GSO sends before they
// cross (gso_max_segs 1), so that the receiving namespace's prerouting
// hook sees each datagram as the wire would carry it. Without it a veth
// passes a GSO send of up to 64 datagrams as one packet, and a rule that
// drops 2% of packets drops whole bursts.
func (tp *topology) segmentOnWire(t testing.TB) {
	t.Helper()
	for _, end := range [][2]string{{tp.a, tp.devA}, {tp.b, tp.devB}} {
		command(t, tp.ip, "-n", end[0], "link", "set", "dev", end[1], "gso_max_segs", "1")
	}
}

// inNS returns the command line that runs argv in namespace ns.
func (tp *topology) inNS(ns string, argv ...string) []string {
	return append([]string{tp.ip, "netns", "exec", ns}, argv...)
}

// nftRules are the rules TestPingpongFaults loads into both namespaces,
// for every RoCEv2 packet leaving them. Each has a counter and a comment
// to find it by. The first two only count: all RoCEv2 packets, and those
// with a UDP checksum (goroce sends IPv4 with none, as rxe does). Then 2%
// are dropped; 0.5% of the rest have byte 12 of the UDP payload, the first
// after the BTH, overwritten with 0x55 (a raw @th write: nft does not
// update the UDP checksum for it, so only the ICRC can tell); 10% are
// marked ECN CE, whose IP checksum nft does update. Each numgen draws anew.
const nftRules = `table inet goroce {
	chain output {
		type filter hook output priority filter; policy accept;
		udp dport 4791 counter comment "all"
		udp dport 4791 udp checksum != 0 counter comment "checksummed"
		udp dport 4791 numgen random mod 100 < 2 counter drop comment "drop"
		udp dport 4791 numgen random mod 1000 < 5 counter @th,160,8 set 0x55 comment "corrupt"
		udp dport 4791 numgen random mod 100 < 10 counter ip ecn set ce comment "ce"
	}
}
`

// addRules loads nftRules into namespace ns.
func (tp *topology) addRules(t testing.TB, ns string) {
	t.Helper()
	tp.addRuleset(t, ns, nftRules)
}

// addRuleset loads an nftables ruleset into namespace ns.
func (tp *topology) addRuleset(t testing.TB, ns, rules string) {
	t.Helper()
	argv := tp.inNS(ns, tp.nft, "-f", "-")
	if _, err := tryCommandIn(argv[0], rules, argv[1:]...); err != nil {
		t.Fatalf("load nftables rules in %s: %v", ns, err)
	}
}

var nftCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+ .*comment "(\w+)"`)

// nftCounters returns the packet counts of the rules in namespace ns, by
// comment.
func (tp *topology) nftCounters(t testing.TB, ns string) map[string]uint64 {
	t.Helper()
	argv := tp.inNS(ns, tp.nft, "list", "table", "inet", "goroce")
	out := command(t, argv[0], argv[1:]...)
	c := map[string]uint64{}
	for _, m := range nftCounter.FindAllStringSubmatch(out, -1) {
		c[m[2]], _ = strconv.ParseUint(m[1], 10, 64)
	}
	if len(c) == 0 {
		t.Fatalf("nft counters in %s: found %v in\n%s", ns, c, out)
	}
	return c
}

// udpStats returns the kernel's UDP counters (the Udp: lines of
// /proc/net/snmp) in namespace ns, by name.
func (tp *topology) udpStats(t testing.TB, ns string) map[string]uint64 {
	t.Helper()
	argv := tp.inNS(ns, "cat", "/proc/net/snmp")
	var names, values []string
	for line := range strings.Lines(command(t, argv[0], argv[1:]...)) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "Udp:" {
			if names == nil {
				names = f[1:]
			} else {
				values = f[1:]
			}
		}
	}
	s := map[string]uint64{}
	for i := range min(len(names), len(values)) {
		s[names[i]], _ = strconv.ParseUint(values[i], 10, 64)
	}
	return s
}
