package verbs

import "time"

// Busy polling.
//
// By default the device's reader goroutine waits in the Go netpoller for
// packets, and an application that waits for a completion blocks on a
// channel: a message that ends a wait costs two goroutine wake-ups, a
// few microseconds each, which are most of a small message's latency.
//
// A goroutine that busy-polls instead calls Progress between its checks of
// a CQ or of an MR's remote writes. Progress reads what has arrived on the
// device's socket without waiting and runs the transport on it right
// there, so the completion appears on the polling goroutine with no
// wake-up at all. Meanwhile the reader goroutine stays off the socket (it
// would otherwise be woken for each packet the poller is about to take),
// and the socket is in no epoll set, so no thread of the process is woken
// either; the reader takes the socket back 1 ms after the last Progress
// call, or at once when BusyPoll gives up or EndPoll is called.
//
// The cost is a CPU kept busy for as long as the goroutine polls. On a
// host with fewer cores than spinning goroutines, spinning starves
// whoever has to answer (with both ends of a ping-pong on one 2-core
// host, never spin more than one goroutine per process): BusyPoll
// therefore spins for a bounded time and then returns, for the caller to
// block (CompChannel.Get, MR.WaitRemoteWrites).

// Progress drives the device from the calling goroutine: it reads the
// packets that have arrived on the device's socket, without waiting, and
// runs them through the transport, on this goroutine when the QPs' worker
// is idle. It returns how many packets it read: 0 when none had arrived,
// when another goroutine is reading the socket, or after Close.
//
// Completions and remote writes that the packets bring are visible when
// Progress returns, to CQ.Poll and MR.RemoteWrites. Progress never blocks
// on the network; it is safe to call from several goroutines (one at a
// time reads). The first call after polling ended (or ever) waits until
// the reader goroutine has stepped off the socket, at most a millisecond:
// that wait lets the Go scheduler end the reader's wait in the netpoller,
// which a poller that never blocks would not, on a single P, for as long
// as it polled.
func (d *Device) Progress() int { return d.eng.Progress() }

// EndPoll tells the device that its busy polling has ended, so that the
// reader goroutine takes the socket back at once rather than 1 ms after
// the last Progress call.
func (d *Device) EndPoll() { d.eng.EndPoll() }

// BusyPoll calls done until it returns true, driving the device with
// Progress between calls, for at most spin. It reports whether done
// returned true; when it did not, polling has ended (EndPoll) and the
// caller should block. done runs on the calling goroutine and should be
// cheap: a CQ.Poll, a comparison of MR.RemoteWrites.
//
// After 50 µs without a result the poller also offers its CPU to other
// threads (sched_yield) between its polls, and a poller whose yield lets
// another thread run while another goroutine of the process polls too
// moves its thread to another CPU: two pollers of one process stacked on
// one CPU would take turns there while another CPU idles.
func (d *Device) BusyPoll(spin time.Duration, done func() bool) bool {
	return d.eng.BusyPoll(spin, done)
}
