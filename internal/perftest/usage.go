package perftest

import (
	"fmt"
	"io"
)

// Usage prints the tool's help on w.
func Usage(w io.Writer, t Test) {
	def := defaults(t)
	fmt.Fprintf(w, `Usage:
  %[1]s            start a server and wait for connection
  %[1]s <host>     connect to server at <host>

Options:
  -a, --all                  Run sizes from 2 till 2^23
  -A, --atomic_type=<type>   Type of atomic operation: CMP_AND_SWAP or FETCH_AND_ADD (default FETCH_AND_ADD)
  -b, --bidirectional        Measure bidirectional bandwidth (default unidirectional)
  -c, --connection=<RC/UC/UD> Connection type RC/UC/UD (default RC)
  -d, --ib-dev=<dev>         The goroce device: a device name (goroce_<addr>), an IP address or an
                             interface name (default: the out-of-band connection's local address;
                             a client on the server's own loopback address takes the next one)
  -D, --duration=<sec>       Run the test for a customized period of seconds
  -e, --events               Sleep on CQ events (default poll)
  -f, --margin=<sec>         Measure results within margins (default duration/4)
  -F, --CPU-freq             Accepted for compatibility: goroce measures with the monotonic clock
  -h, --help                 Show this help screen
  -H, --report-histogrm      Print out all results (default print summary only)
  -i, --ib-port=<port>       Use port <port> of the device (default 1, the only one)
  -I, --inline_size=<size>   Max size of message to be sent in inline (default 0)
  -l, --post_list=<size>     Post list of WQEs of <size> size (instead of single post)
  -m, --mtu=<mtu>            MTU size: 256 - 4096 (default port mtu)
  -n, --iters=<iters>        Number of exchanges (at least %[2]d, default %[3]d)
  -N, --noPeak               Don't measure peak bandwidth
  -o, --outs=<num>           Number of outstanding read/atomic requests (default: the device's maximum)
  -p, --port=<port>          Listen on/connect to port <port> (default %[4]d)
  -q, --qp=<num of qp's>     Num of qp's (default 1)
  -Q, --cq-mod               Generate CQE every N WRs (default %[5]d)
  -r, --rx-depth=<dep>       Rx queue size (default %[6]d)
  -s, --size=<size>          Size of message to exchange (default %[7]d)
  -S, --sl=<sl>              SL (default 0)
  -t, --tx-depth=<dep>       Size of tx queue (default %[8]d)
  -u, --qp-timeout=<timeout> QP timeout, timeout value is 4 usec * 2 ^(timeout) (default %[9]d)
  -U, --report-unsorted      Print out unsorted results (default sorted)
  -V, --version              Display version number
  -x, --gid-index=<index>    Test uses GID with GID index (default: the GID of the device's address)
      --out_json             Save the report in a JSON file
      --out_json_file=<file> Name of the JSON file (default perftest_out.json)
      --report_gbits         Report bandwidth in Gb/sec instead of MiB/sec
      --report-both          Report both sides' results in bidirectional tests

 Other perftest options (rdma_cm, multicast, GPU memory, rate limits, …) exit with an error
 that names what goroce lacks.

 Environment:
  GOROCE_PRINT_COUNTERS=1    Print the device's counters on stderr at exit, in one line:
                             "counters: name=value ..."
`, t.Name(), minIter, def.Iters, defaultPort, defCQMod, def.RxDepth, def.Size, def.TxDepth, defQPTimeout)
}
