package main

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/goroce/goroce/verbs"
)

// rxeDevinfo returns the reference guest's ibv_devices and ibv_devinfo -v
// output (testdata/rxe/A-devinfo.txt): the devices table, and the devinfo
// lines from hca_id: up to and including the blank line after the port.
func rxeDevinfo(t *testing.T) (devices, devinfo []string) {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/rxe/A-devinfo.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "hca_id:") {
			devices = lines[:i]
			for j := i; j < len(lines); j++ {
				if lines[j] == "" {
					return devices, lines[i : j+1]
				}
			}
		}
	}
	t.Fatal("no hca_id: block in A-devinfo.txt")
	return nil, nil
}

// layout reduces devinfo lines to their structure: each field's name with
// the tabs around it, without the value. The capability flag names under
// device_cap_flags and the GID lines, whose number varies, collapse into
// one line each.
func layout(lines []string) []string {
	field := regexp.MustCompile(`^(\t*[^\t:]+:\t*)`)
	var out []string
	inFlags := false
	for _, l := range lines {
		if inFlags && strings.HasPrefix(l, "\t\t\t\t\t") {
			continue
		}
		inFlags = strings.HasPrefix(l, "\tdevice_cap_flags:")
		key := l
		if m := field.FindString(l); m != "" && !strings.HasPrefix(l, "\t\t\t\t\t") {
			key = m
		}
		if strings.HasPrefix(l, "\t\t\tGID[") {
			key = "\t\t\tGID[…]:\t\t"
			if len(out) > 0 && out[len(out)-1] == key {
				continue
			}
		}
		out = append(out, key)
	}
	return out
}

func TestDevinfoLayoutMatchesRxe(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	_, ref := rxeDevinfo(t)
	out, errOut, code := runCmd("devinfo", "-v", "-d", "127.0.0.1")
	if code != 0 || errOut != "" {
		t.Fatalf("devinfo -v: exit %d, stderr %q", code, errOut)
	}
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	want, have := layout(ref), layout(got)
	for i := range max(len(want), len(have)) {
		var w, h string
		if i < len(want) {
			w = want[i]
		}
		if i < len(have) {
			h = have[i]
		}
		if w != h {
			t.Errorf("line %d: got %q, rxe %q", i+1, h, w)
		}
	}

	// Values: goroce's, and rxe's where goroce is the same.
	info, err := verbs.LookupDevice("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	same := map[string]bool{"transport": true, "vendor_id": true, "vendor_part_id": true, "hw_ver": true,
		"phys_port_cnt": true, "max_mr_size": true, "page_size_cap": true, "max_qp": true, "max_sge": true,
		"max_sge_rd": true, "max_pd": true, "max_qp_rd_atom": true, "max_qp_init_rd_atom": true, "atomic_cap": true,
		"max_ee": true, "max_srq_sge": true, "max_pkeys": true, "local_ca_ack_delay": true, "state": true,
		"max_mtu": true, "sm_lid": true, "port_lid": true, "port_lmc": true, "link_layer": true, "port_cap_flags2": true,
		"max_vl_num": true, "pkey_tbl_len": true, "gid_tbl_len": true, "active_width": true, "active_speed": true,
		"phys_state": true, "num_comp_vectors": true, "max_tso": true}
	name := regexp.MustCompile(`^\t*([^\t:]+):`)
	refLine := map[string]string{}
	for _, l := range ref {
		if m := name.FindStringSubmatch(l); m != nil {
			refLine[m[1]] = l
		}
	}
	gotLine := map[string]string{}
	for _, l := range got {
		if m := name.FindStringSubmatch(l); m != nil {
			gotLine[m[1]] = l
			if same[m[1]] && l != refLine[m[1]] {
				t.Errorf("%s: got %q, rxe %q", m[1], l, refLine[m[1]])
			}
		}
	}
	for k, v := range map[string]string{
		"hca_id":           "hca_id:\tgoroce_127.0.0.1",
		"node_guid":        "\tnode_guid:\t\t\t" + guidString(info.Attr.NodeGUID),
		"device_cap_flags": "\tdevice_cap_flags:\t\t0x00001800",
		"max_qp_wr":        fmt.Sprintf("\tmax_qp_wr:\t\t\t%d", info.Attr.MaxQPWR),
		"active_mtu":       "\t\t\tactive_mtu:\t\t4096 (5)", // loopback's MTU is 65536
		"max_msg_sz":       "\t\t\tmax_msg_sz:\t\t0x80000000",
		"GID[  1]":         "\t\t\tGID[  1]:\t\t::ffff:127.0.0.1, RoCE v2",
	} {
		if gotLine[k] != v {
			t.Errorf("%s: got %q, want %q", k, gotLine[k], v)
		}
	}
	if !strings.Contains(out, "\tdevice_cap_flags:\t\t0x00001800\n\t\t\t\t\tSYS_IMAGE_GUID\n\t\t\t\t\tRC_RNR_NAK_GEN\n\tmax_sge:") {
		t.Errorf("capability flags not listed:\n%s", out)
	}
	if !strings.Contains(out, fmt.Sprintf("\t\t\tGID[  0]:\t\t%v, RoCE v2\n", info.GIDs[0])) {
		t.Errorf("GID[0] %v missing", info.GIDs[0])
	}
}

// TestDevinfoShort checks that without -v devinfo prints ibv_devinfo's
// short form: the device lines up to phys_port_cnt, then the port up to
// link_layer.
func TestDevinfoShort(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	long, _, _ := runCmd("devinfo", "-v", "-d", "::1")
	short, errOut, code := runCmd("devinfo", "-d", "::1")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var want []string
	keep := true
	for _, l := range strings.Split(long, "\n") {
		switch {
		case strings.HasPrefix(l, "\tmax_mr_size:"), strings.HasPrefix(l, "\t\t\tmax_msg_sz:"):
			keep = false
		case strings.HasPrefix(l, "\t\tport:"), l == "":
			keep = true
		}
		if keep {
			want = append(want, l)
		}
	}
	if got := strings.Join(want, "\n"); short != got {
		t.Errorf("devinfo -d ::1:\n%s\nwant\n%s", short, got)
	}
	if !strings.HasPrefix(short, "hca_id:\tgoroce_::1\n") || !strings.Contains(short, "\t\t\tlink_layer:\t\tEthernet\n\n") {
		t.Errorf("devinfo -d ::1:\n%s", short)
	}
}

func TestDevicesLayoutMatchesRxe(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	ref, _ := rxeDevinfo(t)
	out, errOut, code := runCmd("devices")
	if code != 0 || errOut != "" {
		t.Fatalf("devices: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if lines[0] != ref[0] || lines[1] != ref[1] {
		t.Errorf("header %q, rxe %q", lines[:2], ref[:2])
	}
	row := regexp.MustCompile(`^    (\S+)\s*\t([0-9a-f]{16})(\tin use by pid \d+)?$`)
	if !row.MatchString(ref[2]) {
		t.Errorf("rxe's row %q does not match %v", ref[2], row)
	}
	names := map[string]string{}
	for _, l := range lines[2:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("row %q", l)
			continue
		}
		names[m[1]] = m[2]
	}
	for _, n := range []string{"goroce_127.0.0.1", "goroce_::1"} {
		info, _ := verbs.LookupDevice(n)
		if names[n] != fmt.Sprintf("%016x", info.Attr.NodeGUID) {
			t.Errorf("%s: GUID %q, want %016x", n, names[n], info.Attr.NodeGUID)
		}
	}
}

func TestDevicesInUse(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	d, err := verbs.Open(verbs.Config{Addr: netip.MustParseAddr("127.0.7.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out, _, code := runCmd("devices")
	want := fmt.Sprintf("    goroce_127.0.7.1\t%016x\tin use by pid %d\n", d.QueryDevice().NodeGUID, os.Getpid())
	if code != 0 || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %q in\n%s", code, want, out)
	}
	// devinfo needs no socket: the device's port is taken.
	out, errOut, code := runCmd("devinfo", "-d", "goroce_127.0.7.1")
	if code != 0 || !strings.HasPrefix(out, "hca_id:\tgoroce_127.0.7.1\n") {
		t.Errorf("devinfo of an open device: exit %d, %q\n%s", code, errOut, out)
	}
}

func TestDevinfoList(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	out, _, code := runCmd("devinfo", "-l")
	devs, _ := verbs.ListDevices()
	want := fmt.Sprintf("%d HCAs found:\n", len(devs))
	for _, d := range devs {
		want += "\t" + d.Name + "\n"
	}
	if code != 0 || out != want+"\n" {
		t.Errorf("devinfo -l: exit %d\n%q\nwant\n%q", code, out, want+"\n")
	}
	// Without -d, every device, each ending with a blank line.
	out, _, code = runCmd("devinfo")
	if code != 0 || strings.Count(out, "hca_id:\t") != len(devs) || strings.Count(out, "\n\n") != len(devs) {
		t.Errorf("devinfo: exit %d\n%s", code, out)
	}
}

func TestDevinfoErrors(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"devinfo", "-d", "nosuch0"}, 1, `goroce devinfo: verbs: device "nosuch0": no such device`},
		{[]string{"devinfo", "-d", "192.0.2.254"}, 1, "not an address of this host; devices here: goroce_127.0.0.1 (lo)"},
		{[]string{"devinfo", "-d", "127.0.0.1", "-i", "2"}, 1, "no port 2"},
		{[]string{"devinfo", "-i", "0"}, 2, "ports are numbered from 1"},
		{[]string{"devinfo", "-i", "x"}, 2, "invalid value"},
		{[]string{"devinfo", "-x"}, 2, "flag provided but not defined: -x"},
		{[]string{"devinfo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"devices", "-v"}, 2, "flag provided but not defined: -v"},
		{[]string{"devices", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"devinfo", "-h"}, 0, "usage: goroce devinfo"},
		{[]string{"devices", "-h"}, 0, "usage: goroce devices"},
		{[]string{"devinfo", "-d", "127.0.0.1", "-i", "1"}, 0, ""},
		{[]string{"devinfo", "--ib-dev=lo", "--ib-port=1", "--verbose"}, 0, ""},
	} {
		out, errOut, code := runCmd(tt.args...)
		if code != tt.code || !strings.Contains(errOut, tt.msg) || tt.msg == "" && errOut != "" {
			t.Errorf("%q: exit %d (want %d), stderr %q (want %q)", tt.args, code, tt.code, errOut, tt.msg)
		}
		if tt.code != 0 && out != "" {
			t.Errorf("%q: stdout %q", tt.args, out)
		}
	}
}
