package verbs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/goroce/goroce/internal/device"
	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/internal/memory"
	"github.com/goroce/goroce/internal/netns"
	"github.com/goroce/goroce/internal/ntcopy"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/transport"
	"github.com/goroce/goroce/internal/wire"
)

// Config describes a device. The zero value of every field but Addr works.
type Config struct {
	// Addr is the IP address (IPv4 or IPv6) the device sends from and
	// receives on. Each device needs its own address and port: to run
	// several devices on one host (a server and a client process, say),
	// give them different loopback addresses such as 127.0.0.1 and
	// 127.0.0.2.
	Addr netip.Addr
	// Port is the UDP port; 0 means 4791, the RoCEv2 port, which peers such
	// as Linux rxe always send to.
	Port uint16
	// MTU is the interface MTU from which the port's active MTU follows
	// (rxe's rule: the largest IB MTU not above MTU − 80, 256…4096).
	// 0 means the MTU of the interface that holds Addr.
	MTU int
	// Workers is the number of goroutines that run QPs; 0 means up to 4,
	// bounded by GOMAXPROCS.
	Workers int
	// Fault makes the device's socket misbehave on purpose, for tests and
	// for diagnosing applications: a spec such as
	// "drop=1%,dup=1%,reorder=25%,delay=1ms,corrupt=0.1%,seed=7", or rules
	// such as "rule=drop:ack:for=50ms" (the grammar is in docs/FAULT.md).
	// Faults apply to packets this device sends, after their ICRC is
	// computed, so corrupted packets are caught by the receiver's ICRC
	// check. Empty means none.
	Fault string
	// SameHost moves this device's packets to other goroce devices of the
	// same user, in the same network namespace, through shared memory
	// instead of UDP sockets: the same RoCEv2 packets, ICRC included,
	// without the kernel's copies and system calls (docs/SAMEHOST.md).
	// Traffic to every other peer still goes over UDP. Both devices need
	// it. The environment variable GOROCE_SAMEHOST=1 turns it on for
	// programs that do not set it themselves, such as the perftest tools.
	// It cannot be combined with Fault.
	SameHost bool
	// NetNS names the network namespace the device's sockets live in, as
	// a file: /run/netns/NAME (what "ip netns add NAME" makes) or
	// /proc/PID/ns/net. Addr is then an address in that namespace, and
	// the MTU is that of its interface there. Empty means the process's
	// own namespace. Making sockets in another namespace needs
	// CAP_SYS_ADMIN (root); one process can so hold devices in several,
	// as `goroce bench -veth` does.
	NetNS string
	// WholeWrites sends every RC RDMA WRITE as one message (FIRST,
	// MIDDLE…, LAST), as rxe and RoCE NICs do. Without it, over UDP with
	// GSO, goroce sends each packet of a WRITE of more than one packet as
	// a WRITE_ONLY of its own, so that a run of them is one size and goes
	// to the kernel as one datagram (docs/WIRE.md, "Split WRITEs"). The
	// environment variable GOROCE_WHOLE_WRITES=1 turns it on for programs
	// that do not set it themselves.
	WholeWrites bool
	// Link, when set, replaces the UDP socket: tests use in-memory links.
	// It is an internal type; programs outside goroce leave it nil.
	Link link.Link
}

// Device limits: rxe's (rxe_param.h), within what goroce implements.
const (
	maxQP          = 1<<20 - 16
	maxQPWR        = 1 << 16
	maxSGE         = 32
	maxInline      = 512
	maxCQ          = 1 << 16
	maxCQE         = 1<<20 - 1
	maxMR          = 1 << 19
	maxPD          = 1 << 20
	maxSRQ         = 1 << 16
	maxSRQWR       = 1 << 16
	maxSRQSGE      = 27
	maxAH          = 32767 // rxe's max_ah
	maxMcastGroups = 8192  // rxe's max_mcast_grp
	maxMcastQPs    = 56    // rxe's max_mcast_qp_attach: QPs per group
	maxRdAtom      = 128
	gidTableLen    = 1024
	defaultUDPPort = wire.UDPPort
)

// DeviceAttr are the device's attributes (struct ibv_device_attr).
type DeviceAttr struct {
	FWVer            string
	NodeGUID         uint64
	SysImageGUID     uint64
	MaxMRSize        uint64
	VendorID         uint32
	MaxQP            int
	MaxQPWR          int
	MaxSGE           int
	MaxSGERD         int
	MaxCQ            int
	MaxCQE           int
	MaxMR            int
	MaxPD            int
	MaxQPRdAtom      int // outstanding RDMA READs/atomics a QP accepts
	MaxQPInitRdAtom  int // outstanding RDMA READs/atomics a QP initiates
	MaxSRQ           int
	MaxSRQWR         int
	MaxSRQSGE        int
	MaxInlineData    int
	MaxMsgSize       uint64
	AtomicCap        string // "HCA": atomics are atomic with respect to this device
	PhysPortCnt      int
	LocalCAAckDelay  int
	MaxPKeys         int
	MaxAH            int            // address handles (UD)
	MaxMcastGrp      int            // multicast groups
	MaxMcastQPAttach int            // QPs attached to one group
	DeviceCapFlags   DeviceCapFlags // what the device supports (SYS_IMAGE_GUID, RC_RNR_NAK_GEN)
}

// PortState is a port's state (enum ibv_port_state).
type PortState uint8

const (
	PortDown   PortState = 1
	PortInit   PortState = 2
	PortArmed  PortState = 3
	PortActive PortState = 4
)

func (s PortState) String() string {
	switch s {
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	}
	return fmt.Sprintf("PORT_STATE_%d", uint8(s))
}

// MTU is an IB MTU (enum ibv_mtu).
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

func (m MTU) String() string { return fmt.Sprint(m.Bytes()) }

// ActiveMTU returns the IB MTU rxe uses on an interface of the given MTU:
// the largest not above mtu − 80 (room for Ethernet, IP, UDP and IBA
// headers), between 256 and 4096 (rxe_net.c: rxe_set_mtu).
func ActiveMTU(ifMTU int) MTU {
	for m := MTU4096; m > MTU256; m-- {
		if m.Bytes() <= ifMTU-80 {
			return m
		}
	}
	return MTU256
}

// PortAttr are the port's attributes (struct ibv_port_attr).
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	GIDTblLen  int
	MaxMsgSize uint64
	PKeyTblLen int
	LinkLayer  string // "Ethernet"
}

// GID is a 128-bit global identifier; on RoCE, an IPv6 address or an
// IPv4-mapped IPv6 address.
type GID [16]byte

// GIDFromAddr returns the GID of an address (IPv4 as ::ffff:a.b.c.d).
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address a GID names.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

func (g GID) String() string { return netip.AddrFrom16(g).String() }

// Device is a software RDMA device bound to one IP address.
type Device struct {
	cfg   Config
	name  string
	mem   *memory.Table
	attr  DeviceAttr
	port  PortAttr
	gids  []GID
	local netip.AddrPort
	netns *netns.NS // Config.NetNS, open until Close; nil: the process's own

	eng *device.Engine // the engine: link, readers, workers, QP table

	mu     sync.Mutex
	closed bool
	pds    uint32 // last PD number handed out
	objs   struct{ pds, cqs, ahs int }
	groups map[netip.Addr]*mcGroup // multicast groups joined; guarded by mu

	events chan AsyncEvent

	stats     *stats.Counters
	published *stats.Published // nil when the counters could not be published
}

// ErrClosed is returned by operations on a closed device.
var ErrClosed = errors.New("verbs: device closed")

// lastLevelCache is the size of this machine's last-level cache, read once.
var lastLevelCache = sync.OnceValue(ntcopy.LastLevelCache)

// Open creates a device on cfg.Addr and starts its engine.
func Open(cfg Config) (*Device, error) {
	if !cfg.Addr.IsValid() {
		return nil, errors.New("verbs: Config.Addr is required")
	}
	cfg.Addr = cfg.Addr.Unmap()
	if cfg.Port == 0 {
		cfg.Port = defaultUDPPort
	}
	var ns *netns.NS
	if cfg.NetNS != "" {
		if cfg.Link != nil {
			return nil, errors.New("verbs: Config.NetNS applies to the UDP socket; with Config.Link, make the link in the namespace")
		}
		var err error
		if ns, err = netns.Open(cfg.NetNS); err != nil {
			return nil, fmt.Errorf("verbs: Config.NetNS: %w", err)
		}
	}
	var ifc netIface
	if err := ns.Do(func() error { ifc = interfaceOf(cfg.Addr); return nil }); err != nil {
		ns.Close()
		return nil, fmt.Errorf("verbs: Config.NetNS: %w", err)
	}
	if cfg.MTU == 0 {
		cfg.MTU = ifc.mtu
	}
	info := describe(cfg.Addr, ifc, cfg.MTU)
	d := &Device{
		cfg:    cfg,
		local:  netip.AddrPortFrom(cfg.Addr, cfg.Port),
		netns:  ns,
		mem:    memory.NewTable(maxMR),
		events: make(chan AsyncEvent, 256),
		name:   info.Name,
		attr:   info.Attr,
		port:   info.Port,
		gids:   info.GIDs,
		groups: map[netip.Addr]*mcGroup{},
	}
	if p, err := stats.Publish(d.name); err == nil {
		d.published, d.stats = p, p.Counters
	} else {
		d.stats = stats.New() // counters still work, only `goroce stats` cannot see them
	}
	faults, err := fault.Parse(cfg.Fault)
	if err != nil {
		d.closeEarly()
		return nil, fmt.Errorf("verbs: Config.Fault: %w", err)
	}
	if cfg.Link != nil && cfg.Fault != "" {
		d.closeEarly()
		return nil, errors.New("verbs: Config.Fault applies to the UDP socket; with Config.Link, build the fault into the link")
	}
	d.eng, err = device.Open(device.Config{
		Addr: d.local, Link: cfg.Link, Fault: faults, NetNS: ns,
		SameHost:    cfg.SameHost || os.Getenv("GOROCE_SAMEHOST") == "1",
		WholeWrites: cfg.WholeWrites || os.Getenv("GOROCE_WHOLE_WRITES") == "1",
		Workers:     cfg.Workers, MaxQP: maxQP, Stats: d.stats,
		Placement: transport.NewPlacement(lastLevelCache()),
	})
	if err != nil {
		d.closeEarly()
		return nil, fmt.Errorf("verbs: open %v: %w", d.local, err)
	}
	return d, nil
}

// closeEarly releases what Open took before it failed.
func (d *Device) closeEarly() {
	if d.published != nil {
		d.published.Close()
	}
	d.netns.Close()
}

// Name returns the device's name, "goroce_" followed by its address.
func (d *Device) Name() string { return d.name }

// Addr returns the address and UDP port the device uses.
func (d *Device) Addr() netip.AddrPort { return d.local }

// QueryDevice returns the device attributes.
func (d *Device) QueryDevice() DeviceAttr { return d.attr }

// QueryPort returns the attributes of port 1, the only port.
func (d *Device) QueryPort() PortAttr { return d.port }

// GIDs returns the GID table, in rxe's order: for an IPv4 address, the
// link-local GID at index 0 and the IPv4-mapped GID at index 1 (the one to
// use); for an IPv6 address, the link-local GID and then the address.
func (d *Device) GIDs() []GID { return append([]GID(nil), d.gids...) }

// QueryGID returns GID index i.
func (d *Device) QueryGID(i int) (GID, error) {
	if i < 0 || i >= len(d.gids) {
		return GID{}, fmt.Errorf("verbs: %s: GID index %d out of range (table has %d)", d.name, i, len(d.gids))
	}
	return d.gids[i], nil
}

// GIDIndex returns the index of the GID of the device's own address.
func (d *Device) GIDIndex() int {
	g := GIDFromAddr(d.cfg.Addr)
	for i, x := range d.gids {
		if x == g {
			return i
		}
	}
	return 0
}

// Close stops the device: every QP moves to the error state with its work
// requests flushed, the goroutines stop and the socket closes. It never
// blocks on a peer.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	clear(d.groups) // the engine leaves them
	d.mu.Unlock()
	err := d.eng.Close()
	close(d.events)
	if d.published != nil {
		d.published.Close()
	}
	d.netns.Close() // the sockets made in it are closed
	return err
}

// Counters returns the device's counters by name: rxe's fifteen
// hw_counters (sent_pkts … rdma_recvs), then goroce's own, which
// docs/VERBS.md lists with what each counts. `goroce stats` shows the
// same numbers from another process.
func (d *Device) Counters() map[string]uint64 {
	d.eng.UpdateLinkCounters()
	return d.stats.Snapshot().Map()
}

// nodeGUID derives the node GUID as rxe does from the MAC (EUI-64), or,
// without one, from the address.
func nodeGUID(addr netip.Addr, mac net.HardwareAddr) uint64 {
	if len(mac) == 6 {
		return uint64(mac[0]^2)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xfffe<<24 |
			uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
	}
	b := addr.As16()
	g := uint64(0x0200000000000000)
	for _, x := range b {
		g = g*31 + uint64(x)
	}
	return g&0x00ffffffffffffff | 0x0200000000000000
}

// gidTable builds the GID table: index 0 the link-local GID (from the MAC,
// or from the node GUID when there is none), then the address.
func gidTable(addr netip.Addr, mac net.HardwareAddr) []GID {
	var ll GID
	ll[0], ll[1] = 0xfe, 0x80
	guid := nodeGUID(addr, mac)
	for i := range 8 {
		ll[8+i] = byte(guid >> (56 - 8*i))
	}
	own := GIDFromAddr(addr)
	if own == ll || addr.Is6() && addr.IsLinkLocalUnicast() {
		return []GID{own}
	}
	return []GID{ll, own}
}
