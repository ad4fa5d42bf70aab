package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/goroce/goroce/verbs"
)

const devicesHelp = `usage: goroce devices

Lists the goroce devices of this host as ibv_devices lists RDMA devices:
one per address of each interface that is up, named goroce_<address>,
with its node GUID. A third column names the process that has the
device open, if any. See docs/TOOLS.md.
`

func runDevices(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devices", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, devicesHelp) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goroce devices: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	devs, err := verbs.ListDevices()
	if err != nil {
		fmt.Fprintf(stderr, "goroce devices: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(stdout, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(stdout, "    %-16s\t%016x", d.Name, d.Attr.NodeGUID)
		if d.PID != 0 {
			fmt.Fprintf(stdout, "\tin use by pid %d", d.PID)
		}
		fmt.Fprintln(stdout)
	}
	return 0
}

const devinfoHelp = `usage: goroce devinfo [-v] [-d DEVICE] [-i PORT] [-l]

Prints the attributes of goroce devices as ibv_devinfo prints those of
RDMA devices: every device of this host (see goroce devices), or the one
DEVICE names: a device name (goroce_127.0.0.1), an address of this host
(127.0.0.1, ::1, 127.0.0.2) or an interface (lo). No device is opened, so
devices in use by other processes can be shown. Exit status: 0, 1 if a
device or port does not exist, 2 on bad usage.
`

func runDevinfo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devinfo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dev string
	var port int
	var list, verbose bool
	for _, n := range []string{"d", "ib-dev"} {
		fs.StringVar(&dev, n, "", "show only this device: name, address or interface")
	}
	for _, n := range []string{"i", "ib-port"} {
		fs.IntVar(&port, n, 0, "show only this port (goroce devices have one, port 1)")
	}
	for _, n := range []string{"l", "list"} {
		fs.BoolVar(&list, n, false, "print only the device names")
	}
	for _, n := range []string{"v", "verbose"} {
		fs.BoolVar(&verbose, n, false, "print all the attributes")
	}
	fs.Usage = func() { fmt.Fprint(stderr, devinfoHelp); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "goroce devinfo: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	seen := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { seen[f.Name] = true })
	if (seen["i"] || seen["ib-port"]) && port <= 0 {
		fmt.Fprintf(stderr, "goroce devinfo: -i %d: ports are numbered from 1\n", port)
		return 2
	}
	var devs []verbs.DeviceInfo
	var err error
	if dev != "" && !list {
		var d verbs.DeviceInfo
		d, err = verbs.LookupDevice(dev)
		devs = append(devs, d)
	} else {
		devs, err = verbs.ListDevices()
	}
	if err != nil {
		fmt.Fprintf(stderr, "goroce devinfo: %v\n", err)
		return 1
	}
	if list {
		s := "s"
		if len(devs) == 1 {
			s = ""
		}
		fmt.Fprintf(stdout, "%d HCA%s found:\n", len(devs), s)
		for _, d := range devs {
			fmt.Fprintf(stdout, "\t%s\n", d.Name)
		}
		fmt.Fprintln(stdout)
		return 0
	}
	if len(devs) == 0 {
		fmt.Fprintln(stderr, "goroce devinfo: no goroce devices found (no interface is up)")
		return 1
	}
	for _, d := range devs {
		if port > d.Attr.PhysPortCnt {
			fmt.Fprintf(stderr, "goroce devinfo: %s: no port %d (the device has %d)\n", d.Name, port, d.Attr.PhysPortCnt)
			return 1
		}
		printDevinfo(stdout, d, verbose)
	}
	return 0
}

// printDevinfo prints one device as ibv_devinfo does, field for field and
// tab for tab (testdata/rxe/A-devinfo.txt is rxe's). Fields goroce does not
// model are printed with the value that is true of it: 0 for what it does
// not have (RD, memory windows, multicast, ODP, TSO, RSS, …), rxe's value
// for what it shares with rxe (page sizes, the one VL, link width and
// speed, which mean nothing to a software device).
func printDevinfo(w io.Writer, d verbs.DeviceInfo, verbose bool) {
	a, p := d.Attr, d.Port
	pr := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	pr("hca_id:\t%s", d.Name)
	pr("\ttransport:\t\t\t%s (%d)", "InfiniBand", 0)
	if a.FWVer != "" {
		pr("\tfw_ver:\t\t\t\t%s", a.FWVer)
	}
	pr("\tnode_guid:\t\t\t%s", guidString(a.NodeGUID))
	pr("\tsys_image_guid:\t\t\t%s", guidString(a.SysImageGUID))
	pr("\tvendor_id:\t\t\t0x%04x", a.VendorID)
	pr("\tvendor_part_id:\t\t\t%d", 0)
	pr("\thw_ver:\t\t\t\t0x%X", 0)
	pr("\tphys_port_cnt:\t\t\t%d", a.PhysPortCnt)
	if verbose {
		pr("\tmax_mr_size:\t\t\t0x%x", a.MaxMRSize)
		pr("\tpage_size_cap:\t\t\t0x%x", 0xfffff000) // any page size from 4 KiB: MRs are byte-granular
		pr("\tmax_qp:\t\t\t\t%d", a.MaxQP)
		pr("\tmax_qp_wr:\t\t\t%d", a.MaxQPWR)
		pr("\tdevice_cap_flags:\t\t0x%08x", uint32(a.DeviceCapFlags))
		for _, n := range a.DeviceCapFlags.Names() {
			pr("\t\t\t\t\t%s", n)
		}
		pr("\tmax_sge:\t\t\t%d", a.MaxSGE)
		pr("\tmax_sge_rd:\t\t\t%d", a.MaxSGERD)
		pr("\tmax_cq:\t\t\t\t%d", a.MaxCQ)
		pr("\tmax_cqe:\t\t\t%d", a.MaxCQE)
		pr("\tmax_mr:\t\t\t\t%d", a.MaxMR)
		pr("\tmax_pd:\t\t\t\t%d", a.MaxPD)
		pr("\tmax_qp_rd_atom:\t\t\t%d", a.MaxQPRdAtom)
		pr("\tmax_ee_rd_atom:\t\t\t%d", 0)
		// No device-wide pool: every QP has its own MaxQPRdAtom responder
		// resources.
		pr("\tmax_res_rd_atom:\t\t%d", a.MaxQP*a.MaxQPRdAtom)
		pr("\tmax_qp_init_rd_atom:\t\t%d", a.MaxQPInitRdAtom)
		pr("\tmax_ee_init_rd_atom:\t\t%d", 0)
		atom, atomNum := atomicCap(a.AtomicCap)
		pr("\tatomic_cap:\t\t\t%s (%d)", atom, atomNum)
		pr("\tmax_ee:\t\t\t\t%d", 0)
		pr("\tmax_rdd:\t\t\t%d", 0)
		pr("\tmax_mw:\t\t\t\t%d", 0)
		pr("\tmax_raw_ipv6_qp:\t\t%d", 0)
		pr("\tmax_raw_ethy_qp:\t\t%d", 0)
		pr("\tmax_mcast_grp:\t\t\t%d", a.MaxMcastGrp)
		pr("\tmax_mcast_qp_attach:\t\t%d", a.MaxMcastQPAttach)
		pr("\tmax_total_mcast_qp_attach:\t%d", a.MaxMcastGrp*a.MaxMcastQPAttach)
		pr("\tmax_ah:\t\t\t\t%d", a.MaxAH)
		pr("\tmax_fmr:\t\t\t%d", 0)
		pr("\tmax_srq:\t\t\t%d", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			pr("\tmax_srq_wr:\t\t\t%d", a.MaxSRQWR)
			pr("\tmax_srq_sge:\t\t\t%d", a.MaxSRQSGE)
		}
		pr("\tmax_pkeys:\t\t\t%d", a.MaxPKeys)
		pr("\tlocal_ca_ack_delay:\t\t%d", a.LocalCAAckDelay)
		pr("\tgeneral_odp_caps:")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			pr("\t%s_odp_caps:", t)
			pr("\t\t\t\t\tNO SUPPORT")
		}
		pr("\tcompletion_timestamp_mask not supported")
		pr("\tcore clock not supported")
		pr("\tdevice_cap_flags_ex:\t\t0x%X", uint32(a.DeviceCapFlags))
		pr("\ttso_caps:")
		pr("\t\tmax_tso:\t\t\t%d", 0)
		pr("\trss_caps:")
		pr("\t\tmax_rwq_indirection_tables:\t\t\t%d", 0)
		pr("\t\tmax_rwq_indirection_table_size:\t\t\t%d", 0)
		pr("\t\trx_hash_function:\t\t\t\t0x%x", 0)
		pr("\t\trx_hash_fields_mask:\t\t\t\t0x%X", 0)
		pr("\tmax_wq_type_rq:\t\t\t%d", 0)
		pr("\tpacket_pacing_caps:")
		pr("\t\tqp_rate_limit_min:\t%dkbps", 0)
		pr("\t\tqp_rate_limit_max:\t%dkbps", 0)
		pr("\ttag matching not supported")
		pr("\tnum_comp_vectors:\t\t%d", 1)
	}
	for port := 1; port <= a.PhysPortCnt; port++ {
		pr("\t\tport:\t%d", port)
		pr("\t\t\tstate:\t\t\t%s (%d)", p.State, p.State)
		pr("\t\t\tmax_mtu:\t\t%s (%d)", p.MaxMTU, p.MaxMTU)
		pr("\t\t\tactive_mtu:\t\t%s (%d)", p.ActiveMTU, p.ActiveMTU)
		pr("\t\t\tsm_lid:\t\t\t%d", 0)
		pr("\t\t\tport_lid:\t\t%d", 0)
		pr("\t\t\tport_lmc:\t\t0x%02x", 0)
		pr("\t\t\tlink_layer:\t\t%s", p.LinkLayer)
		if verbose {
			pr("\t\t\tmax_msg_sz:\t\t0x%x", p.MaxMsgSize)
			pr("\t\t\tport_cap_flags:\t\t0x%08x", 0) // no CM_SUP: no connection manager yet
			pr("\t\t\tport_cap_flags2:\t0x%04x", 0)
			pr("\t\t\tmax_vl_num:\t\t%s (%d)", "1", 1)
			pr("\t\t\tbad_pkey_cntr:\t\t0x%x", 0)
			pr("\t\t\tqkey_viol_cntr:\t\t0x%x", 0)
			pr("\t\t\tsm_sl:\t\t\t%d", 0)
			pr("\t\t\tpkey_tbl_len:\t\t%d", p.PKeyTblLen)
			pr("\t\t\tgid_tbl_len:\t\t%d", p.GIDTblLen)
			pr("\t\t\tsubnet_timeout:\t\t%d", 0)
			pr("\t\t\tinit_type_reply:\t%d", 0)
			pr("\t\t\tactive_width:\t\t%sX (%d)", "1", 1)
			pr("\t\t\tactive_speed:\t\t%s (%d)", "2.5 Gbps", 1)
			phys, physNum := "LINK_UP", 5
			if p.State != verbs.PortActive {
				phys, physNum = "DISABLED", 3
			}
			pr("\t\t\tphys_state:\t\t%s (%d)", phys, physNum)
			for i, g := range d.GIDs {
				pr("\t\t\tGID[%3d]:\t\t%s, RoCE v2", i, g)
			}
		}
		pr("")
	}
}

// guidString formats a GUID as ibv_devinfo does: four groups of four hex
// digits.
func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48&0xffff, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// atomicCap returns the name and value of enum ibv_atomic_cap for
// DeviceAttr.AtomicCap.
func atomicCap(s string) (string, int) {
	switch strings.ToUpper(s) {
	case "HCA":
		return "ATOMIC_HCA", 1
	case "GLOB":
		return "ATOMIC_GLOB", 2
	}
	return "ATOMIC_NONE", 0
}
