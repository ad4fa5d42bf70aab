package verbs

import (
	"bytes"
	"testing"
)

// TestColdWrites: the device places RDMA WRITEs whose target is likely out
// of cache with non-temporal stores (transport.Placement), on every link:
// the data arrives the same, at odd offsets, and cold_writes counts those
// messages. The test lowers the device's reuse distance to 64 KiB, so that
// each 100 KiB WRITE is cold and each 4 KiB one is not.
func TestColdWrites(t *testing.T) {
	if d := lastLevelCache() / 3; d > 0 {
		t.Logf("reuse distance here: %d KiB", d>>10)
	}
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			if got, want := db.eng.Placement().Distance, uint64(lastLevelCache()/3); got != want {
				t.Fatalf("reuse distance %d, want a third of the last-level cache, %d", got, want)
			}
			db.eng.Placement().Distance = 64 << 10 // before the QPs exist: their workers see it
			a, b := newEndpoint(t, da, 1<<20), newEndpoint(t, db, 1<<20)
			connect(t, a, b, MTU1024)
			fill(a.buf, 3)
			writeEach(t, a, b, 0, 1)
			if got := db.Counters()["cold_writes"]; got != 2 {
				t.Errorf("cold_writes %d, want 2", got)
			}
		})
	}
}

// TestColdSources: a device's requesters ask for the payload of messages
// whose source is likely out of cache as they send it, on every link
// (transport.Placement): the data arrive the same, and cold_sources
// counts those messages. The test lowers the sender's reuse distance to
// 64 KiB, so that each 100 KiB WRITE is cold, the one of 4 KiB + 3 bytes
// (two packets, 4 KiB of distance) is not, and the one of 4 KiB, a
// single packet at MTU 4096, is not judged.
func TestColdSources(t *testing.T) {
	for _, lk := range links {
		t.Run(lk.name, func(t *testing.T) {
			da, db := lk.open(t)
			da.eng.Placement().Distance = 64 << 10 // before the QPs exist: their workers see it
			a, b := newEndpoint(t, da, 1<<20), newEndpoint(t, db, 1<<20)
			connect(t, a, b, MTU4096)
			fill(a.buf, 5)
			writeEach(t, a, b, 3, 0)
			if got := da.Counters()["cold_sources"]; got != 2 {
				t.Errorf("cold_sources %d, want 2", got)
			}
			if got := db.Counters()["cold_sources"]; got != 0 {
				t.Errorf("the responder counted %d cold sources, want 0", got)
			}
		})
	}
}

// writeEach has a send RDMA WRITEs of 100 KiB + 5, 4 KiB, 100 KiB + 1 and
// 4 KiB + 3 bytes to b, one after another, WRITE i from a's buffer at
// i*1000+srcOff to b's at i<<18+dstOff, and checks that each target holds
// its source and the bytes beside it are untouched.
func writeEach(t *testing.T, a, b *endpoint, srcOff, dstOff int) {
	t.Helper()
	sizes := []int{100<<10 + 5, 4 << 10, 100<<10 + 1, 4<<10 + 3}
	for i, n := range sizes {
		_, err := a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{a.mr.SGE(i*1000+srcOff, n)}, RemoteAddr: b.mr.Addr() + uint64(i<<18+dstOff), RKey: b.mr.RKey()}})
		must(t, err)
		if wc := wait(t, a.cq, 1)[0]; wc.Status != WCSuccess {
			t.Fatalf("WRITE %d: %+v", i, wc)
		}
	}
	settle(b.dev)
	for i, n := range sizes {
		src, off := i*1000+srcOff, i<<18+dstOff
		if !bytes.Equal(b.buf[off:off+n], a.buf[src:src+n]) || off > 0 && b.buf[off-1] != 0 || b.buf[off+n] != 0 {
			t.Errorf("WRITE %d (%d bytes): target differs from source", i, n)
		}
	}
}
