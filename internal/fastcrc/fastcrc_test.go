package fastcrc

// These tests compare Update with hash/crc32 and do not depend on the
// assembly, so they also test the fallback. Each runs once with every
// implementation the CPU has (eachImpl): hash/crc32 alone, the 256-bit code
// (AVX2 and VPCLMULQDQ), the 512-bit code (AVX-512). Run them with
//
//	go test ./internal/fastcrc               # every implementation the CPU has
//	go test -tags purego ./internal/fastcrc  # fallback (hash/crc32)
//	go test -race ./internal/fastcrc
//	go test -run '^$' -fuzz FuzzUpdate -fuzztime 100000x ./internal/fastcrc
//
// TestConstants reads the constant table of fastcrc_amd64.s as text and
// recomputes every entry by polynomial arithmetic over GF(2); TestModel runs a
// pure-Go model of the assembly's algorithm, with the same constants, against
// hash/crc32.

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
)

func randomBytes(r *rand.Rand, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

// maxShort is the longest input the tests give UpdateShort, which is for
// headers; longer ones take the same code paths as Update.
const maxShort = 512

// check compares Update, UpdateShort (up to maxShort bytes) and UpdateCopy
// with hash/crc32.
func check(t *testing.T, crc uint32, p []byte, what string) {
	t.Helper()
	want := crc32.Update(crc, crc32.IEEETable, p)
	if got := Update(crc, p); got != want {
		t.Fatalf("%s: Update(%#08x, %d bytes) = %#08x, want %#08x", what, crc, len(p), got, want)
	}
	if len(p) <= maxShort {
		if got := UpdateShort(crc, p); got != want {
			t.Fatalf("%s: UpdateShort(%#08x, %d bytes) = %#08x, want %#08x", what, crc, len(p), got, want)
		}
	}
	checkCopy(t, crc, p, want, what)
}

// checkCopy checks that UpdateCopy returns want. It writes into a buffer
// with guard bytes around the copy and at an offset of its own (lengths and
// offsets differ, so source and destination alignment vary independently):
// the copy must equal p and the guards must be untouched.
func checkCopy(t *testing.T, crc uint32, p []byte, want uint32, what string) {
	t.Helper()
	off := (len(p) * 13) % 64
	buf := copyBuf[:off+len(p)+128]
	copy(buf, guards)
	dst := buf[64+off : 64+off+len(p)+int(crc%32)] // longer than p, by up to 31
	if got := UpdateCopy(crc, dst, p); got != want {
		t.Fatalf("%s: UpdateCopy(%#08x, %d bytes) = %#08x, want %#08x", what, crc, len(p), got, want)
	}
	if !bytes.Equal(dst[:len(p)], p) {
		t.Fatalf("%s: UpdateCopy of %d bytes: the copy differs from the input", what, len(p))
	}
	before, after := buf[:64+off], buf[64+off+len(p):]
	if !bytes.Equal(before, guards[:len(before)]) || !bytes.Equal(after, guards[:len(after)]) {
		t.Fatalf("%s: UpdateCopy of %d bytes wrote outside the copy", what, len(p))
	}
}

// copyBuf is check's destination, guards what it holds around the copy.
// Tests that call check run one at a time (FuzzUpdate included), never in
// parallel.
var (
	copyBuf = make([]byte, 1<<21)
	guards  = bytes.Repeat([]byte{0xa5}, 1<<21)
)

// eachImpl runs test once with each implementation this CPU has (hash/crc32
// alone, the 256-bit and the 512-bit vector code), the fastest last.
func eachImpl(t *testing.T, test func(t *testing.T)) {
	defer func(old int) { impl = old }(impl)
	for _, i := range impls() {
		impl = i
		t.Run(implNames[i], test)
	}
}

// TestUpdateCopyShortDst checks that UpdateCopy refuses a destination
// shorter than its input instead of writing past it.
func TestUpdateCopyShortDst(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("UpdateCopy into a shorter dst did not panic")
		}
	}()
	UpdateCopy(0, make([]byte, 100), make([]byte, 101))
}

// TestExhaustive tries every length up to 5000 (300 for hash/crc32 alone)
// at every offset 0..63 from a 64-byte aligned allocation, Update,
// UpdateShort and (once per length and offset) UpdateCopy, which covers
// every threshold and remainder of
// the vector code (32, 64, 128, 256, multiples of 16, 32, 64, 128 and 256,
// aligned and unaligned loads), with initial values 0, 0xffffffff and a random one.
func TestExhaustive(t *testing.T) { eachImpl(t, testExhaustive) }

func testExhaustive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	buf := randomBytes(r, 5000+64)
	maxLen := 5000
	switch {
	case impl == implNone:
		// Only the fallback's own thresholds: slicing-by-8 below 64
		// bytes, hash/crc32 (tested by Go) from there on.
		maxLen = 300
	case testing.Short():
		maxLen = 1100
	}
	var what [64]string
	for off := range what {
		what[off] = fmt.Sprintf("offset %d", off)
	}
	for n := 0; n <= maxLen; n++ {
		for off := 0; off < 64; off++ {
			p := buf[off : off+n]
			checkUpdate(t, 0, p, off)
			checkUpdate(t, 0xffffffff, p, off)
			check(t, r.Uint32(), p, what[off]) // and UpdateCopy
		}
	}
}

// checkUpdate is check without UpdateCopy, and without formatting a
// message unless it fails.
func checkUpdate(t *testing.T, crc uint32, p []byte, off int) {
	t.Helper()
	want := crc32.Update(crc, crc32.IEEETable, p)
	if got := Update(crc, p); got != want {
		t.Fatalf("offset %d: Update(%#08x, %d bytes) = %#08x, want %#08x", off, crc, len(p), got, want)
	}
	if len(p) <= maxShort {
		if got := UpdateShort(crc, p); got != want {
			t.Fatalf("offset %d: UpdateShort(%#08x, %d bytes) = %#08x, want %#08x", off, crc, len(p), got, want)
		}
	}
}

// TestLong tries lengths around 64 KiB and 1 MiB and at the thresholds.
func TestLong(t *testing.T) { eachImpl(t, testLong) }

func testLong(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	buf := randomBytes(r, 1<<20+64+300)
	var lengths []int
	for _, base := range []int{32, 64, 128, 256, 512, 1024, 4096, 1 << 16, 1 << 20} {
		for d := -17; d <= 17; d++ {
			if base+d >= 0 {
				lengths = append(lengths, base+d)
			}
		}
		lengths = append(lengths, base+255, base+256, base+257)
	}
	for _, n := range lengths {
		for _, off := range []int{0, 1, 7, 8, 15, 16, 31, 33, 63} {
			p := buf[off : off+n]
			check(t, 0, p, fmt.Sprintf("offset %d", off))
			check(t, r.Uint32(), p, fmt.Sprintf("offset %d", off))
		}
	}
}

// TestChaining checks Update(Update(c, a), b) == Update(c, a||b) for random
// splits, also into many pieces.
func TestChaining(t *testing.T) { eachImpl(t, testChaining) }

func testChaining(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	buf := randomBytes(r, 20000)
	for range 2000 {
		n := r.IntN(len(buf) + 1)
		if r.IntN(2) == 0 {
			n = r.IntN(1200)
		}
		p := buf[r.IntN(len(buf)-n+1):][:n]
		c := r.Uint32()
		whole := Update(c, p)
		i := r.IntN(n + 1)
		if got := Update(Update(c, p[:i]), p[i:]); got != whole {
			t.Fatalf("split %d+%d: %#08x != %#08x", i, n-i, got, whole)
		}
		dst := make([]byte, n)
		if got := UpdateCopy(UpdateCopy(c, dst, p[:i]), dst[i:], p[i:]); got != whole || !bytes.Equal(dst, p) {
			t.Fatalf("UpdateCopy split %d+%d: %#08x != %#08x, or the copy differs", i, n-i, got, whole)
		}
		got := c
		for q := p; len(q) > 0; {
			k := min(len(q), r.IntN(600))
			got = Update(got, q[:k])
			q = q[k:]
		}
		if got != whole {
			t.Fatalf("%d bytes in pieces: %#08x != %#08x", n, got, whole)
		}
	}
}

func TestAllocs(t *testing.T) { eachImpl(t, testAllocs) }

func testAllocs(t *testing.T) {
	p := make([]byte, 1<<16)
	for _, n := range []int{0, 10, 100, 300, 4096, 1 << 16} {
		var sink uint32
		if a := testing.AllocsPerRun(100, func() { sink = Update(sink, p[:n]) }); a != 0 {
			t.Errorf("Update of %d bytes: %v allocations, want 0", n, a)
		}
		dst := make([]byte, n)
		if a := testing.AllocsPerRun(100, func() { sink = UpdateCopy(sink, dst, p[:n]) }); a != 0 {
			t.Errorf("UpdateCopy of %d bytes: %v allocations, want 0", n, a)
		}
	}
}

// TestUpdateShortStack: UpdateShort of an array on the stack allocates
// nothing, the array does not escape (Update's may, through hash/crc32).
func TestUpdateShortStack(t *testing.T) {
	var sink uint32
	if a := testing.AllocsPerRun(100, func() {
		var b [60]byte
		b[3] = byte(sink)
		sink = UpdateShort(sink, b[:])
	}); a != 0 {
		t.Errorf("UpdateShort of a stack array: %v allocations, want 0", a)
	}
}

// TestConcurrent runs Update from several goroutines (for -race).
func TestConcurrent(t *testing.T) { eachImpl(t, testConcurrent) }

func testConcurrent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	p := randomBytes(r, 10000)
	want := crc32.ChecksumIEEE(p)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				if got := Update(0, p); got != want {
					t.Errorf("Update = %#08x, want %#08x", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func FuzzUpdate(f *testing.F) {
	for _, n := range []int{0, 1, 15, 16, 63, 64, 80, 255, 256, 257, 1000, 4096} {
		f.Add(uint32(n)*0x9e3779b9, bytesOf(n))
	}
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		defer func(old int) { impl = old }(impl)
		for _, impl = range impls() {
			what := "fuzz, " + implNames[impl]
			check(t, crc, p, what)
			i := len(p) / 3
			if got, want := Update(Update(crc, p[:i]), p[i:]), Update(crc, p); got != want {
				t.Fatalf("%s: split at %d of %d: %#08x != %#08x", what, i, len(p), got, want)
			}
		}
	})
}

func bytesOf(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	return p
}

func BenchmarkUpdate(b *testing.B) {
	p := randomBytes(rand.New(rand.NewPCG(9, 10)), 1<<16)
	for _, n := range []int{8, 12, 20, 40, 64, 256, 1024, 4096, 65536} {
		b.Run(fmt.Sprintf("fastcrc/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint32
			for b.Loop() {
				crc = Update(crc, p[:n])
			}
		})
		dst := make([]byte, n)
		b.Run(fmt.Sprintf("copy+fastcrc/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint32
			for b.Loop() {
				copy(dst, p[:n])
				crc = Update(crc, dst)
			}
		})
		b.Run(fmt.Sprintf("UpdateCopy/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint32
			for b.Loop() {
				crc = UpdateCopy(crc, dst, p[:n])
			}
		})
		b.Run(fmt.Sprintf("stdlib/%d", n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var crc uint32
			for b.Loop() {
				crc = crc32.Update(crc, crc32.IEEETable, p[:n])
			}
		})
	}
}

// Polynomial arithmetic over GF(2) for the constants of fastcrc_amd64.s.

// polyP is the generator P(x) of CRC-32/IEEE, bit i the coefficient of x^i.
const polyP = 0x1_04c1_1db7

// xnModP returns x^n mod P(x), by n multiplications by x.
func xnModP(n int) uint32 {
	r := uint32(1)
	for range n {
		r = r<<1 ^ uint32(polyP&0xffffffff)&-(r>>31)
	}
	return r
}

// xnDivP returns the quotient floor(x^n / P(x)) for 32 <= n <= 64, by long
// division.
func xnDivP(n int) uint64 {
	var rem [2]uint64 // x^n, low and high 64 coefficients
	rem[n/64] = 1 << (n % 64)
	var q uint64
	for d := n; d >= 32; d-- {
		if rem[d/64]>>(d%64)&1 == 1 {
			s := d - 32 // rem -= P·x^s
			q |= 1 << s
			rem[0] ^= polyP << s
			rem[1] ^= polyP >> (64 - s)
		}
	}
	if rem[1] != 0 || rem[0]>>32 != 0 {
		panic("remainder not reduced")
	}
	return q
}

// rev32x returns the 33-bit operand the assembly uses for a polynomial K of
// degree < 32: rev32(K)<<1 = rev64(K·x^31).
func rev32x(k uint32) uint64 { return uint64(bits.Reverse32(k)) << 1 }

// rev33 reverses the 33 coefficients of a polynomial of degree 32.
func rev33(k uint64) uint64 { return bits.Reverse64(k) >> 31 }

// lane is a 128-bit register lane: lo holds bytes 0..7, hi bytes 8..15.
type lane struct{ lo, hi uint64 }

// foldConst returns the fold constant pair for folding a lane D bits further
// on: x^(D+32) and x^(D-32) mod P.
func foldConst(d int) lane {
	return lane{rev32x(xnModP(d + 32)), rev32x(xnModP(d - 32))}
}

var (
	// final128 multiplies the high half of the last lane (128 -> 96 bits).
	final128 = rev32x(xnModP(96))
	// final96 multiplies the top 32 bits of the 96 (96 -> 64 bits).
	final96 = rev32x(xnModP(64))
	// barrettP and barrettMu are P and mu = floor(x^64 / P), reflected.
	barrettP  = rev33(polyP)
	barrettMu = rev33(xnDivP(64))
)

func TestConstants(t *testing.T) {
	want := map[string]uint64{}
	pair := func(sym string, off int, k lane) {
		want[fmt.Sprintf("%s+%d", sym, off)] = k.lo
		want[fmt.Sprintf("%s+%d", sym, off+8)] = k.hi
	}
	pair("k2048", 0, foldConst(2048))
	pair("k1536", 0, foldConst(1536))
	pair("k1024", 0, foldConst(1024))
	pair("k768", 0, foldConst(768))
	pair("k512", 0, foldConst(512))
	pair("k256", 0, foldConst(256))
	pair("klanes", 0, foldConst(384))
	pair("klanes", 16, foldConst(256))
	pair("klanes", 32, foldConst(128))
	pair("klanes", 48, lane{})
	pair("k128", 0, foldConst(128))
	pair("k64", 0, lane{final96, 0})
	pair("kbarrett", 0, lane{barrettP, barrettMu})
	pair("mask32", 0, lane{0xffffffff, 0})

	// k512 and k128 are hash/crc32's r2r1 and r4r3, the final constants its
	// r5 and rupoly.
	for key, v := range map[string]uint64{
		"k512+0": 0x154442bd4, "k512+8": 0x1c6e41596,
		"k128+0": 0x1751997d0, "k128+8": 0x0ccaa009e,
		"k64+0": 0x163cd6124, "kbarrett+0": 0x1db710641, "kbarrett+8": 0x1f7011641,
	} {
		if want[key] != v {
			t.Errorf("computed %s = %#x, hash/crc32 has %#x", key, want[key], v)
		}
	}

	f, err := os.Open("fastcrc_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dataRE := regexp.MustCompile(`^DATA\s+(\w+)<>\+(\d+)\(SB\)/8,\s*\$(\w+)`)
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := dataRE.FindStringSubmatch(sc.Text())
		if m == nil {
			if regexp.MustCompile(`^\s*DATA`).MatchString(sc.Text()) {
				t.Errorf("unparsed DATA line %q", sc.Text())
			}
			continue
		}
		key := m[1] + "+" + m[2]
		v, err := strconv.ParseUint(m[3], 0, 64)
		if err != nil {
			t.Errorf("%q: %v", sc.Text(), err)
			continue
		}
		w, ok := want[key]
		switch {
		case !ok:
			t.Errorf("%s = %#x in fastcrc_amd64.s is not checked", key, v)
		case seen[key]:
			t.Errorf("%s defined twice", key)
		case v != w:
			t.Errorf("%s = %#x in fastcrc_amd64.s, want %#x", key, v, w)
		}
		seen[key] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("%s missing from fastcrc_amd64.s", key)
		}
	}
}

// A pure-Go model of ieeeAVX512 and ieeeAVX2, one lane at a time, with the
// constants above; clmul stands for PCLMULQDQ.

func clmul(a, b uint64) lane {
	var r lane
	for i := range 64 {
		if b>>i&1 == 1 {
			r.lo ^= a << i
			if i > 0 {
				r.hi ^= a >> (64 - i)
			}
		}
	}
	return r
}

func (l lane) xor(m lane) lane { return lane{l.lo ^ m.lo, l.hi ^ m.hi} }

func load(p []byte) lane {
	var l lane
	for i := 7; i >= 0; i-- {
		l.lo = l.lo<<8 | uint64(p[i])
		l.hi = l.hi<<8 | uint64(p[8+i])
	}
	return l
}

// fold is VPCLMULQDQ $0x00 xor VPCLMULQDQ $0x11: the lane moved D bits on,
// for the constant pair of D.
func fold(l, k lane) lane { return clmul(l.lo, k.lo).xor(clmul(l.hi, k.hi)) }

// modelCLMUL mirrors ieeeAVX512 (lanes 4) and ieeeAVX2 (lanes 2): crc is
// the CRC register, len(p) at least one register (16·lanes bytes) and a
// multiple of 16. Both keep four accumulators of lanes 128-bit lanes each.
func modelCLMUL(crc uint32, p []byte, lanes int) uint32 {
	reg := 16 * lanes // bytes per register
	z := make([]lane, 4*lanes)
	last := z[3*lanes:] // the accumulator everything is folded onto
	if len(p) >= 4*reg {
		for i := range z {
			z[i] = load(p[16*i:])
		}
		z[0].lo ^= uint64(crc)
		for p = p[4*reg:]; len(p) >= 4*reg; p = p[4*reg:] {
			for i := range z {
				z[i] = fold(z[i], foldConst(4*reg*8)).xor(load(p[16*i:]))
			}
		}
		for i := range 3 { // the first three accumulators onto the last
			for j := range lanes {
				last[j] = last[j].xor(fold(z[lanes*i+j], foldConst((3-i)*reg*8)))
			}
		}
	} else {
		for j := range lanes {
			last[j] = load(p[16*j:])
		}
		last[0].lo ^= uint64(crc)
		p = p[reg:]
	}
	for ; len(p) >= reg; p = p[reg:] {
		for j := range lanes {
			last[j] = fold(last[j], foldConst(reg*8)).xor(load(p[16*j:]))
		}
	}
	x := last[lanes-1]
	for j := range lanes - 1 {
		x = x.xor(fold(last[j], foldConst((lanes-1-j)*128)))
	}
	for ; len(p) >= 16; p = p[16:] {
		x = fold(x, foldConst(128)).xor(load(p))
	}
	// 128 -> 96 bits.
	x = clmul(x.lo, final128).xor(lane{x.hi, 0})
	// 96 -> 64 bits.
	w := clmul(x.lo&0xffffffff, final96).xor(lane{x.lo>>32 | x.hi<<32, x.hi >> 32})
	// Barrett reduction.
	q := clmul(w.lo&0xffffffff, barrettMu).lo & 0xffffffff
	return uint32(clmul(q, barrettP).xor(w).lo >> 32)
}

func TestModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	buf := randomBytes(r, 3000)
	for _, lanes := range []int{4, 2} {
		for n := 16 * lanes; n <= len(buf); n += 16 {
			if n > 1200 && n%256 != 0 && n%256 != 240 {
				continue
			}
			c := r.Uint32()
			if got, want := ^modelCLMUL(^c, buf[:n], lanes), crc32.Update(c, crc32.IEEETable, buf[:n]); got != want {
				t.Fatalf("model with %d lanes of %d bytes: %#08x, want %#08x", lanes, n, got, want)
			}
		}
	}
}
