package perftest

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/getopt"
	"github.com/goroce/goroce/internal/netns"
)

// Verb is the operation a test measures.
type Verb int

const (
	Send Verb = iota
	Write
	Read
	Atomic
)

// Kind is bandwidth or latency.
type Kind int

const (
	BW Kind = iota
	Lat
)

// Test names one of the eight tools.
type Test struct {
	Verb Verb
	Kind Kind
}

// Tools maps each tool name to its test.
var Tools = map[string]Test{
	"ib_send_bw": {Send, BW}, "ib_send_lat": {Send, Lat},
	"ib_write_bw": {Write, BW}, "ib_write_lat": {Write, Lat},
	"ib_read_bw": {Read, BW}, "ib_read_lat": {Read, Lat},
	"ib_atomic_bw": {Atomic, BW}, "ib_atomic_lat": {Atomic, Lat},
}

// Name returns the tool's name, e.g. "ib_write_bw".
func (t Test) Name() string {
	return "ib_" + [...]string{"send", "write", "read", "atomic"}[t.Verb] + [...]string{"_bw", "_lat"}[t.Kind]
}

// verbStr is perftest's testsStr.
func (t Test) verbStr() string {
	return [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}[t.Verb]
}

// Conn types (perftest's connStr).
const (
	RC = "RC"
	UC = "UC"
	UD = "UD"
)

// Atomic operations (-A).
const (
	CmpAndSwap  = "CMP_AND_SWAP"
	FetchAndAdd = "FETCH_AND_ADD"
)

// Perftest's limits and defaults (perftest_parameters.h).
const (
	maxSize        = 8 << 20 // MAX_SIZE: -a sweeps 2 … 2^23
	minIter        = 5
	defQPTimeout   = 14
	defCQMod       = 100
	defaultPort    = 18515
	cqModSizeLimit = 8192 // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	ucMaxRx        = 16000
)

// Params are a test's settings, with perftest's defaults and dependencies.
type Params struct {
	Test
	Server     string  // host to connect to; "" on the server
	Port       int     // -p: TCP port of the out-of-band exchange
	Device     string  // -d: the goroce device: an IP address, interface or device name
	IBPort     int     // -i
	Size       int     // -s
	All        bool    // -a: sweep sizes 2 … 8 MiB
	Iters      int     // -n
	QPs        int     // -q
	Duration   int     // -D seconds; 0 means run Iters
	Margin     int     // -f seconds
	MTU        int     // -m bytes; 0 means the port's active MTU
	GIDIndex   int     // -x; -1 means the GID of the device's own address
	Conn       string  // -c: RC, UC or UD
	TxDepth    int     // -t
	RxDepth    int     // -r
	CQMod      int     // -Q
	Inline     int     // -I
	QPTimeout  int     // -u
	Duplex     bool    // -b
	CPUFreq    bool    // -F (accepted: goroce measures with the monotonic clock)
	AtomicOp   string  // -A
	OutReads   int     // -o; 0 means the device's maximum
	PostList   int     // -l
	Events     bool    // -e
	NoPeak     bool    // -N
	SL         int     // -S
	Gbits      bool    // --report_gbits
	JSON       bool    // --out_json
	JSONFile   string  // --out_json_file
	Unsorted   bool    // -U
	Histogram  bool    // -H
	ReportBoth bool    // --report-both
	RateLimit  float64 // --rate_limit, in RateUnits; 0: none (the software limiter, --rate_limit_type=SW)
	RateUnits  byte    // --rate_units: 'M' MiB/s, 'g' Gb/s (default), 'p' packets/s
	BurstSize  int     // --burst_size: WRs per burst; 0 means TxDepth

	// Counters, not a perftest option, is where Run writes the device's
	// counters when the test ends, passed or failed (stats.Line); nil
	// writes none. Main sets it to stderr with GOROCE_PRINT_COUNTERS=1 in
	// the environment, as rc_pingpong does.
	Counters io.Writer

	// PollBW, not a perftest option, lets a bandwidth test's waits
	// busy-poll as a latency test's do (busySpin). Main sets it for the
	// tools (asTool); goroce bench, with both ends in one process, only
	// with -poll.
	PollBW bool

	// NetNS, not a perftest option, is the network namespace the
	// out-of-band connection is made in: goroce bench -veth runs the
	// server in one and the client in another. Nil: the process's own.
	NetNS *netns.NS

	reqSize, reqCQMod, reqRxDepth bool

	// Set when the run starts, for the JSON report.
	devName            string
	mtuBytes, gidIndex int
}

// ErrHelp and ErrVersion are returned by Parse for -h and -V.
var (
	ErrHelp    = errors.New("help requested")
	ErrVersion = errors.New("version requested")
)

// UsageError is a command-line error; the tool prints it and exits 1.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return &UsageError{fmt.Sprintf(format, a...)} }

// The perftest options goroce reads, then the ones it knows but lacks (each
// with why), so that a script using one fails loudly rather than measuring
// something else.
var specs = []getopt.Spec{
	getopt.Arg('p', "port"), getopt.Arg('d', "ib-dev"), getopt.Arg('i', "ib-port"), getopt.Arg('m', "mtu"),
	getopt.Arg('s', "size"), getopt.Arg('n', "iters"), getopt.Arg('t', "tx-depth"), getopt.Arg('u', "qp-timeout"),
	getopt.Arg('S', "sl"), getopt.Arg('x', "gid-index"), getopt.Flag('a', "all"), getopt.Flag('F', "CPU-freq"),
	getopt.Arg('c', "connection"), getopt.Arg('q', "qp"), getopt.Flag('e', "events"), getopt.Arg('I', "inline_size"),
	getopt.Arg('o', "outs"), getopt.Flag('h', "help"), getopt.Arg('r', "rx-depth"), getopt.Flag('b', "bidirectional"),
	getopt.Arg('Q', "cq-mod"), getopt.Flag('N', "noPeak"), getopt.Flag('V', "version"), getopt.Flag('H', "report-histogrm"),
	getopt.Flag('U', "report-unsorted"), getopt.Arg('A', "atomic_type"), getopt.Arg('l', "post_list"),
	getopt.Arg('D', "duration"), getopt.Arg('f', "margin"), getopt.Flag(0, "report_gbits"), getopt.Flag(0, "out_json"),
	getopt.Arg(0, "out_json_file"), getopt.Flag(0, "report-both"), getopt.Flag(0, "use_old_post_send"),
	// Known, not supported:
	getopt.Flag('R', "rdma_cm"), getopt.Flag('z', "comm_rdma_cm"), getopt.Arg('T', "tos"), getopt.Flag('g', "mcg"),
	getopt.Arg('M', "MGID"), getopt.Flag('O', "dualport"), getopt.Flag('C', "report-cycles"), getopt.Arg('X', "vector"),
	getopt.Arg('L', "hop_limit"), getopt.Arg('w', "limit_bw"), getopt.Arg('y', "limit_msgrate"), getopt.Arg('W', "report-counters"),
	getopt.Flag(0, "run_infinitely"), getopt.Flag(0, "use-srq"), getopt.Flag(0, "odp"), getopt.Flag(0, "dont_xchg_versions"),
	getopt.Arg(0, "use_cuda"), getopt.Arg(0, "use_rocm"), getopt.Arg(0, "mmap"), getopt.Flag(0, "cpu_util"),
	getopt.Arg(0, "rate_limit"), getopt.Arg(0, "rate_units"), getopt.Arg(0, "rate_limit_type"), getopt.Arg(0, "burst_size"),
	getopt.Arg(0, "latency_gap"), getopt.Arg(0, "flow_label"), getopt.Arg(0, "retry_count"),
	getopt.Arg(0, "recv_post_list"), getopt.Flag(0, "reversed"), getopt.Arg(0, "output"), getopt.Flag(0, "use-null-mr"),
	getopt.Arg(0, "source_ip"),
}

var unsupported = map[string]string{
	"rdma_cm":            "goroce has no rdma_cm yet; the tools exchange QP records over TCP",
	"comm_rdma_cm":       "goroce has no rdma_cm yet",
	"tos":                "traffic class is set through rdma_cm, which goroce lacks",
	"mcg":                "multicast tests are not implemented",
	"MGID":               "multicast tests are not implemented",
	"dualport":           "a goroce device has one port",
	"report-cycles":      "goroce measures time, not CPU cycles",
	"vector":             "goroce has no completion vectors",
	"hop_limit":          "hop limit applies to raw Ethernet QPs only",
	"limit_bw":           "bandwidth limits are not implemented",
	"limit_msgrate":      "message rate limits are not implemented",
	"report-counters":    "use `goroce stats` for the device counters",
	"run_infinitely":     "infinite runs are not implemented; use -D",
	"use-srq":            "the perftest SRQ mode is not implemented",
	"odp":                "goroce registers ordinary Go memory; there is no on-demand paging",
	"dont_xchg_versions": "goroce always exchanges versions",
	"use_cuda":           "goroce has no GPU memory",
	"use_rocm":           "goroce has no GPU memory",
	"mmap":               "goroce registers Go memory, not mapped files",
	"cpu_util":           "CPU utilisation reports are not implemented",
	"latency_gap":        "latency gaps are not implemented",
	"flow_label":         "flow labels are not implemented in the tools",
	"retry_count":        "the retry count is fixed at 7, as perftest's default",
	"recv_post_list":     "receive post lists are not implemented",
	"reversed":           "reversed traffic is not implemented",
	"output":             "the short output modes are not implemented",
	"use-null-mr":        "null MRs are not implemented",
	"source_ip":          "the device address (-d) is the source",
}

// defaults returns perftest's defaults for t (init_perftest_params).
func defaults(t Test) Params {
	p := Params{Test: t, RateUnits: 'g', Port: defaultPort, IBPort: 1, Iters: 1000, QPs: 1, Duration: 0, Margin: -1,
		GIDIndex: -1, Conn: RC, CQMod: defCQMod, Inline: -1, QPTimeout: defQPTimeout, AtomicOp: FetchAndAdd, PostList: 1}
	p.Size = 2
	p.TxDepth = 1
	if t.Kind == BW {
		p.Size, p.TxDepth = 65536, 128
	}
	if t.Verb == Atomic {
		p.Size = 8
	}
	if t.Kind == BW && t.Verb == Write {
		p.Iters = 5000
	}
	p.RxDepth = 1
	if t.Verb == Send {
		p.RxDepth = 512
	}
	return p
}

// Parse reads a tool's command line (without the program name).
func Parse(t Test, args []string) (*Params, error) {
	p := defaults(t)
	opts, operands, err := getopt.Parse(args, specs)
	if err != nil {
		return nil, usagef("%v", err)
	}
	duration := false
	for _, o := range opts {
		if why, ok := unsupported[o.Spec.Long]; ok {
			return nil, usagef("goroce's %s does not support %s: %s", t.Name(), o.Name, why)
		}
		num := func(lo, hi int) (int, error) {
			v, err := strconv.ParseInt(o.Arg, 0, 64)
			if err != nil || v < int64(lo) || v > int64(hi) {
				return 0, usagef("%s %q: want an integer in %d..%d", o.Name, o.Arg, lo, hi)
			}
			return int(v), nil
		}
		var err error
		switch o.Spec.Long {
		case "help":
			return nil, ErrHelp
		case "version":
			return nil, ErrVersion
		case "port":
			p.Port, err = num(1, 65535)
		case "ib-dev":
			p.Device = o.Arg
		case "ib-port":
			p.IBPort, err = num(1, 1)
		case "mtu":
			if p.MTU, err = num(256, 4096); err == nil && mtuEnum(p.MTU) == 0 {
				err = usagef("%s %d: want 256, 512, 1024, 2048 or 4096", o.Name, p.MTU)
			}
		case "size":
			p.Size, err = num(1, 1<<31)
			p.reqSize = true
		case "iters":
			p.Iters, err = num(minIter, 1<<31-1)
		case "tx-depth":
			p.TxDepth, err = num(1, 1<<15)
		case "qp-timeout":
			p.QPTimeout, err = num(0, 31)
		case "sl":
			p.SL, err = num(0, 15)
		case "gid-index":
			p.GIDIndex, err = num(0, 1<<16)
		case "all":
			p.All = true
		case "CPU-freq":
			p.CPUFreq = true
		case "connection":
			switch c := strings.ToUpper(o.Arg); c {
			case RC, UC, UD:
				p.Conn = c
			case "XRC", "DC", "SRD", "DC_CPU":
				err = usagef("goroce's %s does not support -c %s: goroce offers RC, UC and UD", t.Name(), o.Arg)
			default:
				err = usagef("%s %q: want RC, UC or UD", o.Name, o.Arg)
			}
		case "qp":
			p.QPs, err = num(1, 1<<16)
		case "events":
			p.Events = true
		case "inline_size":
			p.Inline, err = num(0, 512)
		case "outs":
			p.OutReads, err = num(1, 128)
		case "rx-depth":
			p.RxDepth, err = num(1, 1<<15)
			p.reqRxDepth = true
		case "bidirectional":
			p.Duplex = true
		case "cq-mod":
			p.CQMod, err = num(1, 1024)
			p.reqCQMod = true
		case "noPeak":
			p.NoPeak = true
		case "report-histogrm":
			p.Histogram = true
		case "report-unsorted":
			p.Unsorted = true
		case "atomic_type":
			switch o.Arg {
			case CmpAndSwap, FetchAndAdd:
				p.AtomicOp = o.Arg
			default:
				err = usagef("%s %q: want CMP_AND_SWAP or FETCH_AND_ADD", o.Name, o.Arg)
			}
		case "post_list":
			p.PostList, err = num(1, 1<<12)
		case "duration":
			p.Duration, err = num(1, 1<<20)
			duration = true
		case "margin":
			p.Margin, err = num(0, 1<<20)
		case "report_gbits":
			p.Gbits = true
		case "out_json":
			p.JSON = true
		case "out_json_file":
			p.JSON, p.JSONFile = true, o.Arg
		case "report-both":
			p.ReportBoth = true
		case "use_old_post_send":
		case "rate_limit":
			if p.RateLimit, err = strconv.ParseFloat(o.Arg, 64); err != nil || p.RateLimit <= 0 {
				err = usagef("%s %q: want a positive rate", o.Name, o.Arg)
			}
		case "rate_units":
			switch o.Arg {
			case "M", "g", "p":
				p.RateUnits = o.Arg[0]
			default:
				err = usagef("%s %q: invalid rate limit units, use M, g or p", o.Name, o.Arg)
			}
		case "rate_limit_type":
			if o.Arg != "SW" {
				err = usagef("goroce's %s does not support %s %s: goroce has the software rate limiter (SW) only", t.Name(), o.Name, o.Arg)
			}
		case "burst_size":
			p.BurstSize, err = num(1, 1<<20)
		}
		if err != nil {
			return nil, err
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		p.Server = operands[0]
	default:
		return nil, usagef("more than one server name given: %q", operands)
	}
	if err := p.dependencies(duration); err != nil {
		return nil, err
	}
	return &p, nil
}

// dependencies applies perftest's rules between settings (parts of parser
// and force_dependecies that apply to goroce).
func (p *Params) dependencies(duration bool) error {
	if p.Kind == Lat && p.QPs > 1 {
		return usagef("-q: latency tests use one QP")
	}
	if p.Kind == Lat && p.Duplex {
		return usagef("-b: bidirectional mode is for bandwidth tests")
	}
	if p.Verb == Atomic && p.Size != 8 {
		return usagef("-s: message size cannot be changed for atomic tests")
	}
	if p.Verb == Atomic && p.All {
		return usagef("-a: atomic tests have one size (8 bytes)")
	}
	if p.Conn != RC && (p.Verb == Read || p.Verb == Atomic) {
		return usagef("-c %s: %s needs RC", p.Conn, p.Name())
	}
	if p.Conn == UD && p.Verb != Send {
		return usagef("-c UD: only the send tests run on UD")
	}
	if duration {
		if p.All {
			return usagef("-D: duration mode does not support running on all sizes (-a)")
		}
		if p.Events {
			return usagef("-D: duration mode doesn't work with events (-e)")
		}
		if p.Margin < 0 {
			p.Margin = p.Duration / 4
		}
		if p.Duration <= 2*p.Margin {
			return usagef("-D %d -f %d: the duration must be longer than twice the margin", p.Duration, p.Margin)
		}
		p.NoPeak = true
	} else {
		p.Duration = 0
		p.TxDepth = min(p.TxDepth, p.Iters)
		if p.Verb == Send {
			p.RxDepth = min(p.RxDepth, p.Iters)
		}
		// Nothing flow-controls UC and UD: every receive is posted up
		// front, up to perftest's UC_MAX_RX.
		if p.Conn != RC && p.Verb == Send && !p.reqRxDepth {
			p.RxDepth = min(p.Iters, ucMaxRx)
		}
	}
	if p.Verb != Send {
		p.RxDepth = 1
	}
	if p.Size > cqModSizeLimit && !p.All && !p.Events && !p.reqCQMod {
		p.CQMod = 1 // perftest signals every large message for a correct peak
	}
	if p.RateLimit > 0 {
		if p.Kind != BW || p.Verb == Atomic || p.Verb == Send && p.Duplex {
			return usagef("--rate_limit: the software rate limiter runs BW tests only, not atomic or bidirectional send tests")
		}
		if p.BurstSize == 0 {
			p.BurstSize = p.TxDepth
		}
	} else if p.BurstSize > 0 {
		return usagef("--burst_size: burst mode needs --rate_limit")
	}
	if p.PostList > 1 {
		if p.Kind != BW {
			return usagef("-l: post lists are supported in BW tests only")
		}
		if p.Duration == 0 && p.Iters%p.PostList != 0 {
			return usagef("-l %d: the number of iterations must be a multiple of the post list size", p.PostList)
		}
		if !p.reqCQMod {
			p.CQMod = p.PostList
		} else if p.PostList%p.CQMod != 0 {
			return usagef("-l %d -Q %d: the post list size must be a multiple of the CQ moderation", p.PostList, p.CQMod)
		}
	}
	p.CQMod = min(p.CQMod, p.TxDepth)
	if p.Verb == Read || p.Verb == Atomic {
		p.Inline = 0
	}
	if p.Inline < 0 {
		p.Inline = 0 // goroce copies at post time anyway; inline changes nothing on the wire
	}
	if p.All {
		p.Size = maxSize
	}
	if p.Verb == Send && p.RxDepth%2 == 1 && !p.All {
		p.RxDepth++ // perftest's work-around for odd receive depths
	}
	return nil
}

// mtuEnum is the IB MTU enum of n bytes (1 = 256 … 5 = 4096), 0 if none.
func mtuEnum(n int) int {
	for e, b := 1, 256; b <= 4096; e, b = e+1, b*2 {
		if b == n {
			return e
		}
	}
	return 0
}

// sizes returns the message sizes to run: Size, or 2 … 8 MiB with -a
// (2 … the MTU on UD).
func (p *Params) sizes(mtu int) []int {
	if !p.All {
		return []int{p.Size}
	}
	top := maxSize
	if p.Conn == UD {
		top = mtu
	}
	var s []int
	for n := 2; n <= top; n *= 2 {
		s = append(s, n)
	}
	return s
}
