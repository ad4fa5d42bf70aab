package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// Loss cells run with nftables rules in netns roce-host that drop and
// corrupt RoCE packets on bridge br-roce, the only path between goroce
// and the guest. The bridge family's hooks see each frame the bridge
// passes: input the guest's frames to the host, output the host's frames
// to the guest (once per port they go out of).
const (
	lossTable = "interop_loss"
	// corruptPermille is the share of RoCE packets, each way, whose first
	// byte after the BTH a loss cell overwrites.
	corruptPermille = 2
)

// lossRules are the rules of a loss cell that drops permille ‰ of the
// RoCE packets each way. Each rule counts what it matches, under a
// comment the harness reads it by, and each numgen draws anew.
//
// Corruption overwrites byte 12 of the UDP payload, the first after the
// BTH (@th,160,8: a raw write, for which nft adjusts no checksum), so
// that only the ICRC tells. The two ways differ in the UDP checksum:
//   - in: a received frame's checksum is final; it is set to 0 (none, on
//     IPv4), or the host's UDP would drop the packet before goroce sees
//     it. rxe sends 0 anyway.
//   - out: the host's datagrams pass the hook with the checksum still to
//     be computed (CHECKSUM_PARTIAL: the bridge offloads it, the tap to
//     the guest does not, so the kernel completes it when it transmits on
//     the tap, over the corrupted byte). Clearing it here would make the
//     completed sum wrong, and the guest would drop the packet.
func lossRules(permille int) string {
	return fmt.Sprintf(`table bridge %[1]s {
	chain in {
		type filter hook input priority filter; policy accept;
		udp dport 4791 counter comment "in_all"
		udp dport 4791 numgen random mod 1000 < %[2]d counter drop comment "in_drop"
		udp dport 4791 numgen random mod 1000 < %[3]d counter @th,160,8 set 0x55 udp checksum set 0 comment "in_corrupt"
	}
	chain out {
		type filter hook output priority filter; policy accept;
		udp dport 4791 counter comment "out_all"
		udp dport 4791 numgen random mod 1000 < %[2]d counter drop comment "out_drop"
		udp dport 4791 numgen random mod 1000 < %[3]d counter @th,160,8 set 0x55 comment "out_corrupt"
	}
}
`, lossTable, permille, corruptPermille)
}

// nftCounts are a loss table's counters, by comment.
type nftCounts map[string]uint64

var nftCounter = regexp.MustCompile(`counter packets (\d+) bytes \d+ .*comment "(\w+)"`)

// parseNftCounters reads the counters of `nft list table` output.
func parseNftCounters(out string) nftCounts {
	c := nftCounts{}
	for _, m := range nftCounter.FindAllStringSubmatch(out, -1) {
		c[m[2]], _ = strconv.ParseUint(m[1], 10, 64)
	}
	return c
}

func nft(stdin string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return string(b), fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// loss is a loss cell's rules while they are loaded.
type loss struct {
	segs int // br-roce's gso_max_segs before
	done bool
}

// startLoss loads the rules of a cell with permille ‰ loss. The hooks
// must see one packet per datagram: goroce sends runs of packets as UDP
// GSO super-packets, which the kernel segments when a device on the way
// cannot carry them. The bridge segments them itself, before its hooks,
// when it cannot: so it does as long as its only port, the tap, has no
// UDP segmentation offload, and gso_max_segs 1 on the bridge makes sure
// of it whatever its ports offer. stop restores the bridge's limit.
func startLoss(permille int) (*loss, error) {
	clearLoss()
	segs, err := gsoMaxSegs(bridge)
	if err != nil {
		return nil, err
	}
	if b, err := exec.Command("ip", "-n", netns, "link", "set", "dev", bridge, "gso_max_segs", "1").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gso_max_segs 1 on %s: %v: %s", bridge, err, strings.TrimSpace(string(b)))
	}
	l := &loss{segs: segs}
	if _, err := nft(lossRules(permille), "-f", "-"); err != nil {
		l.stop()
		return nil, err
	}
	return l, nil
}

// counters reads the rules' counters.
func (l *loss) counters() (nftCounts, error) {
	out, err := nft("", "list", "table", "bridge", lossTable)
	if err != nil {
		return nil, err
	}
	c := parseNftCounters(out)
	for _, k := range []string{"in_all", "in_drop", "in_corrupt", "out_all", "out_drop", "out_corrupt"} {
		if _, ok := c[k]; !ok {
			return nil, fmt.Errorf("nft: no counter %q in\n%s", k, out)
		}
	}
	return c, nil
}

// stop removes the rules and restores the bridge's gso_max_segs; it may
// be called again.
func (l *loss) stop() {
	if l.done {
		return
	}
	l.done = true
	clearLoss()
	_ = exec.Command("ip", "-n", netns, "link", "set", "dev", bridge, "gso_max_segs", strconv.Itoa(l.segs)).Run()
}

// clearLoss removes the loss table if it is there (one an interrupted
// run left), so that no other cell runs lossy.
func clearLoss() {
	_ = exec.Command("ip", "netns", "exec", netns, "nft", "delete", "table", "bridge", lossTable).Run()
}

func gsoMaxSegs(dev string) (int, error) {
	b, err := exec.Command("ip", "-n", netns, "-d", "-j", "link", "show", "dev", dev).Output()
	if err != nil {
		return 0, fmt.Errorf("ip link show %s: %v", dev, err)
	}
	var links []struct {
		GSOMaxSegs int `json:"gso_max_segs"`
	}
	if err := json.Unmarshal(b, &links); err != nil || len(links) != 1 || links[0].GSOMaxSegs == 0 {
		return 0, fmt.Errorf("ip link show %s: no gso_max_segs in %s", dev, b)
	}
	return links[0].GSOMaxSegs, nil
}

// lossCheck says what is wrong with a loss cell's evidence: the rules'
// counters and the capture's packets to the guest and from it. The
// capture (tcpdump on br-roce) sees the host's packets before the output
// hook and the guest's after the input hook, so
//   - the output hook counted at least the packets the capture has to the
//     guest (far fewer would be GSO bursts counted as one);
//   - no packet to the guest has a bad ICRC in the capture, and at most
//     the packets from the guest that nft corrupted do.
func lossCheck(n nftCounts, toGuest, toHost flow) []string {
	var bad []string
	if n["in_drop"]+n["out_drop"] == 0 {
		bad = append(bad, "nft dropped no packet")
	}
	if n["in_corrupt"]+n["out_corrupt"] == 0 {
		bad = append(bad, "nft corrupted no packet")
	}
	if n["out_all"] < uint64(toGuest.packets) {
		bad = append(bad, fmt.Sprintf("nft's output hook saw %d packets to the guest, the capture %d: not one per datagram", n["out_all"], toGuest.packets))
	}
	if toGuest.bad > 0 {
		bad = append(bad, fmt.Sprintf("%d bad ICRCs to the guest, captured before nft", toGuest.bad))
	}
	if uint64(toHost.bad) > n["in_corrupt"] {
		bad = append(bad, fmt.Sprintf("%d bad ICRCs from the guest, but nft corrupted %d", toHost.bad, n["in_corrupt"]))
	}
	return bad
}

// lossSummary is the note of a loss cell: what nft did each way.
func lossSummary(n nftCounts) string {
	return fmt.Sprintf("nft to guest %d pkts %d dropped %d corrupted, from guest %d/%d/%d",
		n["out_all"], n["out_drop"], n["out_corrupt"], n["in_all"], n["in_drop"], n["in_corrupt"])
}
