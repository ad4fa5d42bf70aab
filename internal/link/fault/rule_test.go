package fault

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/link"
	"github.com/goroce/goroce/internal/link/linktest"
	"github.com/goroce/goroce/internal/monotime"
	"github.com/goroce/goroce/internal/stats"
	"github.com/goroce/goroce/internal/wire"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  monotime.Time
}

func (c *fakeClock) now() monotime.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = monotime.Time(1000 * time.Second).Add(d)
}

// withClock makes l's fault stage run on a fake clock starting now.
func withClock(l *Link) *fakeClock {
	c := &fakeClock{}
	c.set(0)
	l.st.now, l.st.start = c.now, c.now()
	return c
}

func TestFaultRules(t *testing.T) {
	type step struct {
		at   time.Duration
		pkts []link.Packet
	}
	peer := linktest.MustParse("10.0.0.2:4791")
	send := func(psn uint32) link.Packet { return psnPackets(1, psn, peer)[0] }
	ack := func(psn uint32) link.Packet { return ackPacket(psn, false, peer) }
	nak := func(psn uint32) link.Packet { return ackPacket(psn, true, peer) }
	wr := func(psn uint32) link.Packet {
		b := make([]byte, link.MaxPacket)
		h := wire.Headers{BTH: wire.BTHFields{Opcode: wire.OpWriteOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: psn},
			RETH: wire.RETHFields{VA: 0x1000, RKey: 7, DMALen: 4}}
		return link.Packet{Buf: b[:wire.Build(b, &h, []byte{1, 2, 3, 4})], Peer: peer}
	}
	for _, tc := range []struct {
		name  string
		spec  string
		steps []step
		want  []string // what b receives: "send 1", "ack 2", "nak 3", "write 4"; a "+ce" suffix for CE
		stats faultCounts
		icrc  uint64
	}{
		{
			name: "drop every ACK for 50ms",
			spec: "rule=drop:ack:for=50ms",
			steps: []step{
				{0, []link.Packet{ack(1), send(1)}},
				{10 * time.Millisecond, []link.Packet{ack(2), send(2), nak(2)}},
				{49 * time.Millisecond, []link.Packet{ack(3)}},
				{50 * time.Millisecond, []link.Packet{ack(4), send(4)}},
				{80 * time.Millisecond, []link.Packet{ack(5)}},
			},
			want:  []string{"send 1", "send 2", "ack 4", "send 4", "ack 5"},
			stats: faultCounts{Seen: 9, Dropped: 4, RuleHits: 4},
		},
		{
			name: "ACKs only from 10ms for 10ms",
			spec: "rule=drop:opcode=0x11:from=10ms:for=10ms",
			steps: []step{
				{0, []link.Packet{ack(1)}},
				{10 * time.Millisecond, []link.Packet{ack(2), send(2)}},
				{19 * time.Millisecond, []link.Packet{ack(3)}},
				{20 * time.Millisecond, []link.Packet{ack(4)}},
			},
			want:  []string{"ack 1", "send 2", "ack 4"},
			stats: faultCounts{Seen: 5, Dropped: 2, RuleHits: 2},
		},
		{
			name:  "drop PSN 0x1234 once",
			spec:  "rule=drop:psn=0x1234:once",
			steps: []step{{0, []link.Packet{send(0x1233), send(0x1234), send(0x1235), send(0x1234), ack(0x1234), send(0x1234)}}},
			want:  []string{"send 4659", "send 4661", "send 4660", "ack 4660", "send 4660"},
			stats: faultCounts{Seen: 6, Dropped: 1, RuleHits: 1},
		},
		{
			name:  "corrupt the first 3 WRITE ONLY",
			spec:  "rule=corrupt:opcode=0x0a:count=3",
			steps: []step{{0, []link.Packet{wr(1), send(2), wr(3), wr(4), wr(5), wr(6)}}},
			want:  []string{"send 2", "write 5", "write 6"},
			stats: faultCounts{Seen: 6, Corrupted: 3, RuleHits: 3},
			icrc:  3,
		},
		{
			name:  "first match wins, others act after",
			spec:  "rule=dup:nak:once,rule=ce:ack",
			steps: []step{{0, []link.Packet{nak(1), nak(2), ack(3), send(4)}}},
			want:  []string{"nak 1", "nak 1", "nak 2+ce", "ack 3+ce", "send 4"},
			stats: faultCounts{Seen: 4, Duplicated: 1, CEMarked: 2, RuleHits: 3},
		},
		{
			name:  "QP selector",
			spec:  "rule=drop:qp=0x12",
			steps: []step{{0, []link.Packet{ack(1), send(2)}}},
			want:  []string{"send 2"},
			stats: faultCounts{Seen: 2, Dropped: 1, RuleHits: 1},
		},
		{
			name:  "request selector",
			spec:  "rule=ce:request",
			steps: []step{{0, []link.Packet{ack(1), send(2), wr(3)}}},
			want:  []string{"ack 1", "send 2+ce", "write 3+ce"},
			stats: faultCounts{Seen: 3, CEMarked: 2, RuleHits: 2},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			linktest.CheckNoLeaks(t)
			a, b := faultPair(t, "IPv4", tc.spec)
			clk := withClock(a)
			var got []link.Packet
			for _, s := range tc.steps {
				clk.set(s.at)
				write(t, a, s.pkts)
				got = append(got, readAll(t, a, b)...)
			}
			var names []string
			for _, p := range got {
				name := map[wire.Opcode]string{wire.OpSendOnly: "send", wire.OpAcknowledge: "ack", wire.OpWriteOnly: "write"}[wire.BTH(p.Buf).Opcode()]
				if name == "ack" && wire.AETH(p.Buf[wire.BTHLen:]).Type() != wire.AckTypeACK {
					name = "nak"
				}
				name += " " + strconv.Itoa(int(psnOf(p)))
				if p.CE {
					name += "+ce"
				}
				names = append(names, name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("received %q\nwant     %q", names, tc.want)
			}
			if s := faultsOf(a); s != tc.stats {
				t.Errorf("stats %+v\nwant  %+v", s, tc.stats)
			}
			if e := b.Stats()[stats.ICRCErrors]; e != tc.icrc {
				t.Errorf("receiver ICRC errors %d, want %d", e, tc.icrc)
			}
		})
	}
}
