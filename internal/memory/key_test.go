package memory

import (
	"math/bits"
	"testing"
)

// TestKeysRandom registers 100k regions: keys are distinct, never 0, not
// sequential, and each bit is set about half the time.
func TestKeysRandom(t *testing.T) {
	const n = 100_000
	tab := NewTable(0)
	seen := make(map[uint32]bool, n)
	var ones [32]int
	steps := 0
	var prev uint32
	for i := range n {
		k := mustRegister(t, tab, 1, nil, 0).LKey()
		if k == 0 || seen[k] {
			t.Fatalf("registration %d: key %#x zero or repeated", i, k)
		}
		seen[k] = true
		for b := range 32 {
			ones[b] += int(k >> b & 1)
		}
		if d := k - prev; d == 1 || d == 1<<8 || d == 0xffffffff {
			steps++
		}
		prev = k
	}
	if steps > 2 {
		t.Errorf("%d of %d consecutive keys differ by ±1 or 256", steps, n)
	}
	for b, c := range ones {
		// 50% ± 1%: more than six standard deviations.
		if c < n*49/100 || c > n*51/100 {
			t.Errorf("bit %d set in %d of %d keys", b, c, n)
		}
	}
	if a, b := NewTable(0), NewTable(0); mustRegister(t, a, 1, nil, 0).LKey() == mustRegister(t, b, 1, nil, 0).LKey() {
		t.Error("two tables issued the same first key") // chance 2^-32
	}
}

// script is a rand.Source that returns the given keys, in the high bits.
type script []uint32

func (s *script) Uint64() uint64 {
	k := (*s)[0]
	*s = (*s)[1:]
	return uint64(k)<<32 | uint64(bits.Reverse32(k)) // low bits are ignored
}

// TestKeyRules drives the key generator with chosen numbers: 0, live keys
// and quarantined keys are skipped; a quarantined key returns after
// quarantineLen more keys are freed.
func TestKeyRules(t *testing.T) {
	tab := NewTable(0)
	s := &script{0, 0x11, 0x11, 0x22, 0x11, 0x22, 0x33}
	tab.keys.src = s
	a := mustRegister(t, tab, 1, nil, 0)
	b := mustRegister(t, tab, 1, nil, 0)
	if a.LKey() != 0x11 || b.LKey() != 0x22 {
		t.Fatalf("keys %#x %#x, want 0x11 (0 skipped) and 0x22 (live 0x11 skipped)", a.LKey(), b.LKey())
	}
	if err := tab.Deregister(a); err != nil {
		t.Fatal(err)
	}
	c := mustRegister(t, tab, 1, nil, 0)
	if c.LKey() != 0x33 {
		t.Fatalf("key %#x, want 0x33 (quarantined 0x11 and live 0x22 skipped)", c.LKey())
	}
	*s = script{0x33, 0x22, 0x44} // Reregister: its own live key, and 0x22, are skipped
	if err := tab.Reregister(c, nil, 0); err != nil || c.LKey() != 0x44 {
		t.Fatalf("Reregister: %v, key %#x, want 0x44", err, c.LKey())
	}

	// Free quarantineLen-1 more keys (0x33 was the second): 0x11 leaves quarantine, 0x33 not yet.
	for i := range uint32(quarantineLen - 1) {
		*s = script{0x10000 + i}
		if err := tab.Deregister(mustRegister(t, tab, 1, nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	*s = script{0x33, 0x11}
	if d := mustRegister(t, tab, 1, nil, 0); d.LKey() != 0x11 {
		t.Errorf("key %#x, want 0x11 back from quarantine (0x33 still held)", d.LKey())
	}
	if len(tab.keys.held) != quarantineLen {
		t.Errorf("quarantine holds %d keys, want %d", len(tab.keys.held), quarantineLen)
	}
}
