package main

import (
	"fmt"
	"strconv"
	"strings"
)

// A cell of the matrix: one tool with one set of flags, run both ways.
type cell struct {
	tool      string   // goroce's binary (cmd/<tool>)
	guestTool string   // the real tool in the guest
	kind      string   // "bw", "lat" or "pp"
	args      []string // flags both sides get
	size      int      // expected #bytes column (pp: message size)
	iters     int
	pending   bool // goroce may not support this yet (UC/UD, ud_pingpong)
	// paced: goroce, when it is the sending client, runs perftest's
	// software rate limiter. UC and UD have no flow control, and the
	// emulated guest absorbs far less than a host sender at full speed
	// sends: such a sender overruns the guest's receive queue, and the
	// real server waits forever for the lost messages (as it would behind
	// any slow receiver).
	paced bool
	// hostArgs: flags only goroce's side gets.
	hostArgs []string
	// loss: per mille of the RoCE packets nftables drops each way, on
	// top of 2 ‰ it corrupts (loss.go); 0 for a lossless cell.
	loss int
}

func (c cell) name() string {
	n := strings.TrimSpace(c.tool + " " + strings.Join(c.args, " "))
	if c.loss > 0 {
		n += fmt.Sprintf(" loss=%g%%", float64(c.loss)/10)
	}
	return n
}

// matrix returns the cells the harness runs, each in both directions:
// the perftest and ibv_*_pingpong tools goroce has twins of.
func matrix() []cell {
	const n = 200
	var cs []cell
	bw := func(tool string, conn string, sizes ...int) {
		for _, s := range sizes {
			args := []string{"-s", strconv.Itoa(s), "-n", strconv.Itoa(n)}
			if conn != "RC" {
				args = append(args, "-c", conn)
			}
			cs = append(cs, cell{tool: tool, guestTool: tool, kind: "bw", args: args, size: s, iters: n, pending: conn != "RC", paced: conn != "RC"})
		}
	}
	bw("ib_write_bw", "RC", 2, 4096, 65536)
	bw("ib_read_bw", "RC", 2, 4096, 65536)
	bw("ib_send_bw", "RC", 2, 4096, 65536)
	bw("ib_atomic_bw", "RC", 8)
	bw("ib_send_bw", "UC", 2, 4096, 65536)
	bw("ib_write_bw", "UC", 2, 4096, 65536)
	bw("ib_send_bw", "UD", 2, 1024) // a UD message is at most the path MTU (1024 here)
	for _, t := range []string{"ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_atomic_lat"} {
		size := 2
		if t == "ib_atomic_lat" {
			size = 8
		}
		cs = append(cs, cell{tool: t, guestTool: t, kind: "lat", args: []string{"-n", strconv.Itoa(n)}, size: size, iters: n})
	}
	// WRITEs of several packets: goroce sends each packet as a WRITE_ONLY
	// of its own (docs/WIRE.md, "Split WRITEs"), and waits for the bytes
	// of rxe's one message.
	cs = append(cs, cell{tool: "ib_write_lat", guestTool: "ib_write_lat", kind: "lat", args: []string{"-s", "8192", "-n", strconv.Itoa(n)}, size: 8192, iters: n})
	cs = append(cs,
		cell{tool: "rc_pingpong", guestTool: "ibv_rc_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n)}, size: 4096, iters: n},
		// ibv_ud_pingpong's default 2048 bytes do not fit the guest's 1024-byte path MTU.
		cell{tool: "ud_pingpong", guestTool: "ibv_ud_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n), "-s", "512"}, size: 512, iters: n, pending: true},
		cell{tool: "uc_pingpong", guestTool: "ibv_uc_pingpong", kind: "pp", args: []string{"-n", strconv.Itoa(n)}, size: 4096, iters: n},
	)
	// Several QPs streaming WRITEs into one receiver: goroce's into the
	// guest's rxe, which sends no CNPs and drops what it cannot take, so
	// the QPs' recovery must not give up on a peer that is only slow; and
	// rxe's into goroce. perftest's #iterations counts every QP's.
	writes := func(qps, iters, loss int) {
		args := []string{"-s", "65536", "-n", strconv.Itoa(iters), "-q", strconv.Itoa(qps)}
		cs = append(cs, cell{tool: "ib_write_bw", guestTool: "ib_write_bw", kind: "bw", args: args, size: 65536, iters: qps * iters, loss: loss})
	}
	writes(4, n, 0)
	writes(8, n, 0)
	// Loss cells: RC with rdma-core's and goroce's defaults (retry_cnt 7,
	// timeout 14) through nftables rules on the bridge that drop loss ‰
	// and corrupt 2 ‰ of the RoCE packets each way. rc_pingpong's SENDs
	// of 64 KiB to 4 MiB are the messages; every loss rate at 1 MiB, the
	// other sizes at 2 % and 5 %. The iterations are enough for each run
	// to see drops and corruptions each way, and few enough for the
	// emulated guest to finish in seconds.
	//
	// goroce's rc_pingpong waits 30 s, not its default 5 s, for a
	// completion: rxe, sending, ignores a sequence NAK that comes before
	// an ACK has ended its previous retry, and then resends only when its
	// 67 ms ACK timer fires, so at 5 % loss its 4 MiB message takes about
	// 12 s (docs/INTEROP.md, "Loss cells").
	pp := func(size, iters, loss int) {
		cs = append(cs, cell{tool: "rc_pingpong", guestTool: "ibv_rc_pingpong", kind: "pp",
			args: []string{"-s", strconv.Itoa(size), "-n", strconv.Itoa(iters)}, hostArgs: []string{"--timeout=30s"},
			size: size, iters: iters, loss: loss})
	}
	pp(1<<20, 5, 1)
	pp(1<<20, 5, 10)
	pp(1<<20, 5, 20)
	pp(1<<20, 3, 50)
	for _, loss := range []int{20, 50} {
		pp(64<<10, 50, loss)
	}
	pp(4<<20, 2, 20)
	pp(4<<20, 1, 50)
	writes(4, 50, 10)
	writes(8, 50, 10)
	return cs
}
