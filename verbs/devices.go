package verbs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/goroce/goroce/internal/stats"
)

// A goroce device is not a piece of hardware: like rxe, which binds to a
// network interface, a device can be opened on any local IP address. This
// file says which devices exist on this host and what each would show,
// without opening one; Open uses the same description.

// DeviceInfo describes a device that can be opened on this host, as
// ibv_get_device_list and ibv_query_device describe an RDMA device.
type DeviceInfo struct {
	// Name is the device's name, "goroce_" followed by Addr.
	Name string
	// Addr is the local address the device would use.
	Addr netip.Addr
	// Interface is the network interface that holds Addr (for 127.0.0.2,
	// say, the loopback interface whose 127.0.0.1/8 covers it); empty if
	// none does.
	Interface string
	// PID is the process that has the device open now, as its published
	// counters show (see internal/stats), or 0. Only processes of this user
	// are seen.
	PID int
	// Attr, Port and GIDs are what Device.QueryDevice, Device.QueryPort
	// and Device.GIDs would return on a device opened with Config().
	Attr DeviceAttr
	Port PortAttr
	GIDs []GID
}

// Config returns the configuration that opens the device.
func (d DeviceInfo) Config() Config { return Config{Addr: d.Addr} }

// ErrNoDevice is the error, wrapped, of a LookupDevice that matches nothing.
var ErrNoDevice = errors.New("no such device")

// ListDevices returns the devices of this host: one for each IPv4 and
// IPv6 address of each interface that is up (IPv6 link-local addresses
// excepted: they name the interface's link-local GID, not a device), plus
// the devices other processes have open on further loopback addresses.
// The list is sorted by interface, then address. It opens no socket.
func ListDevices() ([]DeviceInfo, error) {
	ifaces, err := localInterfaces()
	if err != nil {
		return nil, fmt.Errorf("verbs: list devices: %w", err)
	}
	seen := map[netip.Addr]bool{}
	var devs []DeviceInfo
	for _, ifc := range ifaces {
		if !ifc.up {
			continue
		}
		for _, p := range ifc.addrs {
			if a := p.Addr(); usable(a) && !seen[a] {
				seen[a] = true
				devs = append(devs, describe(a, ifc, 0))
			}
		}
	}
	running := runningDevices()
	for name := range running {
		a, err := netip.ParseAddr(strings.TrimPrefix(name, devicePrefix))
		if err != nil || seen[a] {
			continue
		}
		if ifc, ok := ifaceOf(ifaces, a); ok && ifc.up {
			seen[a] = true
			devs = append(devs, describe(a, ifc, 0))
		}
	}
	index := map[string]int{}
	for _, ifc := range ifaces {
		index[ifc.name] = ifc.index
	}
	sort.Slice(devs, func(i, j int) bool {
		if a, b := index[devs[i].Interface], index[devs[j].Interface]; a != b {
			return a < b
		}
		return devs[i].Addr.Less(devs[j].Addr)
	})
	for i := range devs {
		devs[i].PID = running[devs[i].Name]
	}
	return devs, nil
}

// LookupDevice finds a device by its name (goroce_127.0.0.1), by an
// address of this host (127.0.0.1, ::1, or any loopback address such as
// 127.0.0.2), or by an interface name, which picks the interface's first
// IPv4 device, or else its first IPv6 device. The error of a name that
// matches nothing wraps ErrNoDevice and lists the devices there are.
func LookupDevice(name string) (DeviceInfo, error) {
	ifaces, err := localInterfaces()
	if err != nil {
		return DeviceInfo{}, fmt.Errorf("verbs: look up device %q: %w", name, err)
	}
	if a, err := netip.ParseAddr(strings.TrimPrefix(name, devicePrefix)); err == nil {
		a = a.Unmap()
		if ifc, ok := ifaceOf(ifaces, a); ok {
			info := describe(a, ifc, 0)
			info.PID = runningDevices()[info.Name]
			return info, nil
		}
		return DeviceInfo{}, noDevice(name, fmt.Sprintf("%v is not an address of this host", a))
	}
	if strings.HasPrefix(name, devicePrefix) {
		return DeviceInfo{}, noDevice(name, "not goroce_ followed by an address")
	}
	for _, ifc := range ifaces {
		if ifc.name != name {
			continue
		}
		devs, err := ListDevices()
		if err != nil {
			return DeviceInfo{}, err
		}
		for _, d := range devs {
			if d.Interface == name {
				return d, nil // IPv4 sorts first
			}
		}
		return DeviceInfo{}, noDevice(name, "the interface is down or has no usable address")
	}
	return DeviceInfo{}, noDevice(name, "not a device name, an address of this host or an interface")
}

// noDevice builds LookupDevice's error, which lists what exists.
func noDevice(name, why string) error {
	var names []string
	if devs, err := ListDevices(); err == nil {
		for _, d := range devs {
			names = append(names, fmt.Sprintf("%s (%s)", d.Name, d.Interface))
		}
	}
	list := "none"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Errorf("verbs: device %q: %w: %s; devices here: %s", name, ErrNoDevice, why, list)
}

const devicePrefix = "goroce_"

// describe computes what a device on addr shows, on interface ifc, with
// the given interface MTU (0: the interface's). Open and ListDevices both
// use it, so the lister tells the truth about an opened device.
func describe(addr netip.Addr, ifc netIface, mtu int) DeviceInfo {
	if mtu == 0 {
		mtu = ifc.mtu
	}
	guid := nodeGUID(addr, ifc.mac)
	state := PortActive
	if !ifc.up {
		state = PortDown // rxe: the port follows the netdev's carrier
	}
	return DeviceInfo{
		Name:      devicePrefix + addr.String(),
		Addr:      addr,
		Interface: ifc.name,
		Attr: DeviceAttr{
			FWVer: "goroce", NodeGUID: guid, SysImageGUID: guid, MaxMRSize: 1<<64 - 1, VendorID: 0xffffff,
			MaxQP: maxQP, MaxQPWR: maxQPWR, MaxSGE: maxSGE, MaxSGERD: maxSGE, MaxCQ: maxCQ, MaxCQE: maxCQE,
			MaxMR: maxMR, MaxPD: maxPD, MaxQPRdAtom: maxRdAtom, MaxQPInitRdAtom: maxRdAtom,
			MaxSRQ: maxSRQ, MaxSRQWR: maxSRQWR, MaxSRQSGE: maxSRQSGE, MaxInlineData: maxInline,
			MaxMsgSize: 1 << 31, AtomicCap: "HCA", PhysPortCnt: 1, LocalCAAckDelay: 15, MaxPKeys: 64,
			MaxAH: maxAH, MaxMcastGrp: maxMcastGroups, MaxMcastQPAttach: maxMcastQPs,
			DeviceCapFlags: deviceCapFlags,
		},
		Port: PortAttr{State: state, MaxMTU: MTU4096, ActiveMTU: ActiveMTU(mtu),
			GIDTblLen: gidTableLen, MaxMsgSize: 1 << 31, PKeyTblLen: 1, LinkLayer: "Ethernet"},
		GIDs: gidTable(addr, ifc.mac),
	}
}

// usable reports whether a device can be opened on an interface address:
// not an IPv6 link-local address (which needs a zone), not a multicast or
// unspecified one.
func usable(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !(a.Is6() && a.IsLinkLocalUnicast())
}

// netIface is what a device needs to know of its network interface.
type netIface struct {
	name  string
	index int
	mtu   int
	mac   net.HardwareAddr
	up    bool // up and running (carrier)
	loop  bool
	addrs []netip.Prefix
}

// localInterfaces returns the host's interfaces and their addresses.
func localInterfaces() ([]netIface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []netIface
	for _, ifc := range ifs {
		n := netIface{name: ifc.Name, index: ifc.Index, mtu: ifc.MTU, mac: ifc.HardwareAddr,
			up:   ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagRunning != 0,
			loop: ifc.Flags&net.FlagLoopback != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				ip, ok := netip.AddrFromSlice(ipn.IP)
				ones, _ := ipn.Mask.Size()
				if ok {
					ip = ip.Unmap()
					if ip.Is4() && ones > 32 {
						ones -= 96
					}
					n.addrs = append(n.addrs, netip.PrefixFrom(ip, ones))
				}
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// ifaceOf returns the interface that holds addr, or the loopback interface
// whose prefix covers it: Linux accepts any address of 127.0.0.0/8 on lo.
func ifaceOf(ifaces []netIface, addr netip.Addr) (netIface, bool) {
	for _, ifc := range ifaces {
		for _, p := range ifc.addrs {
			if p.Addr() == addr {
				return ifc, true
			}
		}
	}
	for _, ifc := range ifaces {
		for _, p := range ifc.addrs {
			if ifc.loop && p.Contains(addr) {
				return ifc, true
			}
		}
	}
	return netIface{}, false
}

// interfaceOf returns the interface a device on addr uses. An address of
// no interface (a device on an in-memory link, say) gets loopback's MTU if
// it is a loopback address, else Ethernet's, and no MAC.
func interfaceOf(addr netip.Addr) netIface {
	if ifaces, err := localInterfaces(); err == nil {
		if ifc, ok := ifaceOf(ifaces, addr); ok {
			return ifc
		}
	}
	if addr.IsLoopback() {
		return netIface{mtu: 65536, up: true}
	}
	return netIface{mtu: 1500, up: true}
}

// runningDevices returns the devices open in running processes, by name,
// with their process IDs. It is best effort: without a run directory,
// nothing is running.
func runningDevices() map[string]int {
	m := map[string]int{}
	devs, err := stats.List()
	if err != nil {
		return m
	}
	for _, d := range devs {
		m[d.Name] = d.PID
	}
	return m
}
