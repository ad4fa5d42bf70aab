package pingpong

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/goroce/goroce/internal/getopt"
	"github.com/goroce/goroce/internal/link/fault"
	"github.com/goroce/goroce/verbs"
)

// options are the settings of rc_pingpong, uc_pingpong or ud_pingpong,
// with rdma-core's defaults.
type options struct {
	kind     verbs.QPType // RC, UC or UD
	port     uint16       // -p: TCP port of the address exchange
	dev      netip.Addr   // -d: the goroce device, named by the IP address it binds
	ibPort   int          // -i
	size     int          // -s: message size in bytes
	mtu      verbs.MTU    // -m: path MTU
	rxDepth  int          // -r: receives posted at a time
	iters    int          // -n: exchanges
	sl       int          // -l: service level
	events   bool         // -e: sleep on CQ events instead of polling
	gidIdx   int          // -g: -1 means the index of the device's own address
	chk      bool         // -c: validate received buffers
	odp      bool         // -o
	iodp     bool         // -O
	prefetch bool         // -P
	ts       bool         // -t
	dm       bool         // -j
	newSend  bool         // -N
	ccUnprot bool         // -U
	timeout  time.Duration
	fault    string // --fault: verbs.Config.Fault, checked by fault.Parse
	server   string // the positional host: set on the client, empty on the server

	// printCounters, from GOROCE_PRINT_COUNTERS=1 in the environment,
	// prints the device's counters on stderr at exit.
	printCounters bool
}

// defaultOptions returns the defaults of the tool for kind. ud_pingpong's
// message size is 1024 bytes (its usage text says 2048, but main sets
// 1024), the others' 4096; ud_pingpong has no -m, since a UD QP has no
// path MTU.
func defaultOptions(kind Kind) options {
	o := options{
		kind:    kind,
		port:    18515,
		dev:     netip.AddrFrom4([4]byte{127, 0, 0, 1}),
		ibPort:  1,
		size:    4096,
		mtu:     verbs.MTU1024,
		rxDepth: 500,
		iters:   1000,
		gidIdx:  -1,
		timeout: 5 * time.Second,
	}
	if kind == verbs.QPTypeUD {
		o.size, o.mtu = 1024, 0
	}
	return o
}

// The options of rc_pingpong.c and uc_pingpong.c (optstring
// "p:d:i:s:m:r:n:l:eg:oOPtcjNU"), plus goroce's long-only --timeout and
// --fault.
var optSpecs = []getopt.Spec{
	getopt.Arg('p', "port"), getopt.Arg('d', "ib-dev"), getopt.Arg('i', "ib-port"), getopt.Arg('s', "size"),
	getopt.Arg('m', "mtu"), getopt.Arg('r', "rx-depth"), getopt.Arg('n', "iters"), getopt.Arg('l', "sl"),
	getopt.Flag('e', "events"), getopt.Arg('g', "gid-idx"), getopt.Flag('o', "odp"), getopt.Flag('O', "iodp"),
	getopt.Flag('P', "prefetch"), getopt.Flag('t', "ts"), getopt.Flag('c', "chk"), getopt.Flag('j', "dm"),
	getopt.Flag('N', "new_send"), getopt.Flag('U', "allow-cc-unprotected"), getopt.Arg(0, "timeout"),
	getopt.Arg(0, "fault"),
}

// The options of ud_pingpong.c (optstring "p:d:i:s:r:n:l:eg:c"), plus
// --timeout and --fault.
var udOptSpecs = []getopt.Spec{
	getopt.Arg('p', "port"), getopt.Arg('d', "ib-dev"), getopt.Arg('i', "ib-port"), getopt.Arg('s', "size"),
	getopt.Arg('r', "rx-depth"), getopt.Arg('n', "iters"), getopt.Arg('l', "sl"), getopt.Flag('e', "events"),
	getopt.Arg('g', "gid-idx"), getopt.Flag('c', "chk"), getopt.Arg(0, "timeout"), getopt.Arg(0, "fault"),
}

// errUsage means an option's argument was wrong; the caller prints the
// usage, as for any other command-line error.
var errUsage = errors.New("invalid argument")

// parseOptions parses the command line (without the program name) of the
// tool for kind. Numbers are read as strtol does with base 0: decimal, 0x
// hex or 0 octal; unlike strtol, trailing junk is an error.
func parseOptions(kind Kind, args []string) (options, error) {
	o := defaultOptions(kind)
	specs := optSpecs
	if kind == verbs.QPTypeUD {
		specs = udOptSpecs
	}
	opts, operands, err := getopt.Parse(args, specs)
	if err != nil {
		return o, err
	}
	for _, x := range opts {
		if err := o.set(x); err != nil {
			return o, err
		}
	}
	switch len(operands) {
	case 0:
	case 1:
		o.server = operands[0]
	default:
		return o, fmt.Errorf("%w: more than one host given: %q", errUsage, operands)
	}
	return o, nil
}

func (o *options) set(x getopt.Opt) error {
	num := func(lo, hi int64) (int, error) {
		v, err := strconv.ParseInt(x.Arg, 0, 64)
		if err != nil || v < lo || v > hi {
			return 0, fmt.Errorf("%w: %s %q: want an integer in %d..%d", errUsage, x.Name, x.Arg, lo, hi)
		}
		return int(v), nil
	}
	var err error
	switch x.Spec.Long {
	case "port":
		var v int
		v, err = num(0, 65535)
		o.port = uint16(v)
	case "ib-dev":
		if o.dev, err = netip.ParseAddr(x.Arg); err != nil {
			return fmt.Errorf("%w: %s %q: goroce names a device by the IP address it binds, e.g. 127.0.0.2", errUsage, x.Name, x.Arg)
		}
	case "ib-port":
		o.ibPort, err = num(1, 255)
	case "size":
		o.size, err = num(0, 1<<31)
	case "mtu":
		var v int
		if v, err = num(256, 4096); err == nil {
			if o.mtu = mtuOf(v); o.mtu == 0 {
				err = fmt.Errorf("%w: %s %d: want 256, 512, 1024, 2048 or 4096", errUsage, x.Name, v)
			}
		}
	case "rx-depth":
		o.rxDepth, err = num(1, 1<<16)
	case "iters":
		o.iters, err = num(0, 1<<31-1)
	case "sl":
		o.sl, err = num(0, 15)
	case "events":
		o.events = true
	case "gid-idx":
		o.gidIdx, err = num(-1, 1<<16)
	case "odp":
		o.odp = true
	case "iodp":
		o.odp, o.iodp = true, true
	case "prefetch":
		o.prefetch = true
	case "ts":
		o.ts = true
	case "chk":
		o.chk = true
	case "dm":
		o.dm = true
	case "new_send":
		o.newSend = true
	case "allow-cc-unprotected":
		o.ccUnprot = true
	case "timeout":
		if o.timeout, err = time.ParseDuration(x.Arg); err != nil {
			var s float64
			if s, err = strconv.ParseFloat(x.Arg, 64); err == nil {
				o.timeout = time.Duration(s * float64(time.Second))
			}
		}
		if err != nil || o.timeout <= 0 {
			err = fmt.Errorf("%w: %s %q: want a positive duration such as 5s or 500ms", errUsage, x.Name, x.Arg)
		}
	case "fault":
		// Checked here so that a typo fails before a server waits for
		// its client; the device parses it again.
		if _, err = fault.Parse(x.Arg); err != nil {
			err = fmt.Errorf("%w: %s: %w", errUsage, x.Name, err)
		}
		o.fault = x.Arg
	}
	return err
}

// mtuOf is pp_mtu_to_enum: 0 for a size that is no IB MTU.
func mtuOf(n int) verbs.MTU {
	for m := verbs.MTU256; m <= verbs.MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// unsupported reports the first option combination rc_pingpong refuses,
// with rdma-core's checks first, then the features goroce does not have.
func (o *options) unsupported() error {
	switch {
	case o.odp && o.dm:
		return errors.New("-j excludes -o and -O: device memory is never on-demand")
	case o.ccUnprot && o.odp:
		return errors.New("-U excludes -o and -O")
	case o.ccUnprot && o.dm:
		return errors.New("-U excludes -j")
	case !o.odp && o.prefetch:
		return errors.New("-P needs -o or -O: only on-demand memory is prefetched")
	case o.odp:
		return errors.New("goroce does not support on-demand paging (-o, -O, -P): it registers ordinary Go memory")
	case o.ts:
		return errors.New("goroce does not support completion timestamps (-t)")
	case o.dm:
		return errors.New("goroce has no device memory (-j)")
	case o.ccUnprot:
		return errors.New("goroce does not support CoCo unprotected memory (-U)")
	}
	return nil
}

// usage prints the help text of the tool for kind on stdout, where
// rdma-core's tools print it.
func usage(w io.Writer, kind Kind, argv0 string) {
	fmt.Fprintf(w, `Usage:
  %[1]s [options]          run the server: wait for one client
  %[1]s [options] <host>   run the client: connect to the server on <host>

Options:
  -p, --port=<port>       TCP port of the address exchange (default 18515)
  -d, --ib-dev=<addr>     the goroce device: the IP address it binds, UDP
                          port 4791 (default 127.0.0.1); two processes on
                          one host need two addresses, e.g. 127.0.0.2
  -i, --ib-port=<port>    device port (default 1, the only one)
`, argv0)
	if kind == verbs.QPTypeUD {
		io.WriteString(w, `  -s, --size=<bytes>      message size, at most the port's active MTU
                          (default 1024)
`)
	} else {
		io.WriteString(w, `  -s, --size=<bytes>      message size (default 4096)
  -m, --mtu=<bytes>       path MTU: 256, 512, 1024, 2048 or 4096 (default 1024)
`)
	}
	io.WriteString(w, `  -r, --rx-depth=<n>      receives kept posted (default 500)
  -n, --iters=<n>         round trips (default 1000)
  -l, --sl=<sl>           service level (default 0)
  -e, --events            sleep on CQ events rather than poll
  -g, --gid-idx=<index>   local GID index (default: the GID of the
                          device's own address)
  -c, --chk               check every byte of every received message
`)
	if kind != verbs.QPTypeUD {
		io.WriteString(w, `  -N, --new_send          post SENDs as with the ibv_wr_* API (goroce has
                          one posting path; the SENDs are the same)
  -o, --odp               on-demand paging: not supported by goroce
  -O, --iodp              implicit on-demand paging: not supported
  -P, --prefetch          prefetch an on-demand MR: not supported
  -t, --ts                completion timestamps: not supported
  -j, --dm                device memory: not supported
  -U, --allow-cc-unprotected  CoCo unprotected memory: not supported
`)
	}
	io.WriteString(w, `      --timeout=<dur>     fail when the peer is silent this long during the
                          exchange or the ping-pong (default 5s); the server
                          waits for its client without limit
      --fault=<spec>      inject faults into this process's packets: see
                          docs/FAULT.md, e.g.
                          'reorder=25%,dup=1%,delay=1ms,seed=7'

Environment:
  GOROCE_PRINT_COUNTERS=1  print the device's counters on stderr at exit,
                           in one line: "counters: name=value ..."
`)
}
