package verbs

import (
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestLookupDevice(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	for _, tt := range []struct {
		name, want, iface string
	}{
		{"goroce_127.0.0.1", "127.0.0.1", "lo"},
		{"127.0.0.1", "127.0.0.1", "lo"},
		{"127.0.0.2", "127.0.0.2", "lo"}, // covered by lo's 127.0.0.0/8
		{"::1", "::1", "lo"},
		{"goroce_::1", "::1", "lo"},
		{"::ffff:127.0.0.1", "127.0.0.1", "lo"},
		{"lo", "127.0.0.1", "lo"}, // an interface's first IPv4 device
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, err := LookupDevice(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			want := netip.MustParseAddr(tt.want)
			if d.Addr != want || d.Name != "goroce_"+tt.want || d.Interface != tt.iface || d.Config().Addr != want {
				t.Errorf("got %s %v on %q, want %v on %q", d.Name, d.Addr, d.Interface, want, tt.iface)
			}
			if d.Port.State != PortActive || d.Port.LinkLayer != "Ethernet" || len(d.GIDs) == 0 || d.GIDs[len(d.GIDs)-1] != GIDFromAddr(want) {
				t.Errorf("port %+v, GIDs %v", d.Port, d.GIDs)
			}
		})
	}
}

func TestLookupDeviceErrors(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	for _, name := range []string{"nosuch0", "goroce_nosuch", "192.0.2.254", "goroce_198.51.100.7", "", "rxe0"} {
		_, err := LookupDevice(name)
		if !errors.Is(err, ErrNoDevice) {
			t.Errorf("LookupDevice(%q) = %v, want ErrNoDevice", name, err)
			continue
		}
		// The error names the device and lists what exists.
		if msg := err.Error(); !strings.Contains(msg, `"`+name+`"`) || !strings.Contains(msg, "goroce_127.0.0.1 (lo)") || !strings.Contains(msg, "goroce_::1 (lo)") {
			t.Errorf("LookupDevice(%q): %v", name, err)
		}
	}
}

// TestListDevices checks that loopback's two devices are listed, that a
// device another process (here, this one) has open is marked with its PID,
// even on a loopback address no interface holds, and that the lister and
// Open describe a device alike.
func TestListDevices(t *testing.T) {
	t.Setenv("GOROCE_RUN_DIR", t.TempDir())
	dev, err := Open(Config{Addr: netip.MustParseAddr("127.0.6.1")})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	devs, err := ListDevices()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]DeviceInfo{}
	var names []string
	for _, d := range devs {
		byName[d.Name] = d
		names = append(names, d.Name)
	}
	for _, n := range []string{"goroce_127.0.0.1", "goroce_::1", "goroce_127.0.6.1"} {
		if _, ok := byName[n]; !ok {
			t.Errorf("%s missing from %v", n, names)
		}
	}
	for _, d := range devs {
		if d.Addr.Is6() && d.Addr.IsLinkLocalUnicast() {
			t.Errorf("link-local %s listed", d.Name)
		}
	}
	d := byName["goroce_127.0.6.1"]
	if d.PID != os.Getpid() || byName["goroce_127.0.0.1"].PID != 0 {
		t.Errorf("PIDs: 127.0.6.1 %d (want %d), 127.0.0.1 %d (want 0)", d.PID, os.Getpid(), byName["goroce_127.0.0.1"].PID)
	}
	if d.Attr != dev.QueryDevice() || d.Port != dev.QueryPort() || !reflect.DeepEqual(d.GIDs, dev.GIDs()) || d.Name != dev.Name() {
		t.Errorf("lister and Open disagree:\n%+v\n%+v %+v %v", d, dev.QueryDevice(), dev.QueryPort(), dev.GIDs())
	}
	if d.Attr.DeviceCapFlags != DeviceSysImageGUID|DeviceRCRNRNAKGen {
		t.Errorf("device_cap_flags %v", d.Attr.DeviceCapFlags)
	}
}

func TestDescribeDownInterface(t *testing.T) {
	d := describe(netip.MustParseAddr("192.0.2.1"), netIface{name: "eth9", mtu: 1500}, 0)
	if d.Port.State != PortDown || d.Port.ActiveMTU != MTU1024 || d.Name != "goroce_192.0.2.1" {
		t.Errorf("%+v", d)
	}
}

func TestDeviceCapFlagsNames(t *testing.T) {
	for _, tt := range []struct {
		f    DeviceCapFlags
		want string
	}{
		{0, ""},
		{0x01223c76, "BAD_PKEY_CNTR BAD_QKEY_CNTR AUTO_PATH_MIG CHANGE_PHY_PORT UD_AV_PORT_ENFORCE PORT_ACTIVE_EVENT SYS_IMAGE_GUID RC_RNR_NAK_GEN SRQ_RESIZE MEM_WINDOW MEM_MGT_EXTENSIONS MEM_WINDOW_TYPE_2B"},
		{DeviceSysImageGUID | 1<<15 | 1<<31, "SYS_IMAGE_GUID Unknown flags: 0x80008000"},
	} {
		if got := strings.Join(tt.f.Names(), " "); got != tt.want {
			t.Errorf("%#x: %q, want %q", uint32(tt.f), got, tt.want)
		}
	}
}
