package memory

import (
	crand "crypto/rand"
	"math/rand/v2"
)

// quarantineLen is how many freed keys are withheld from reissue.
const quarantineLen = 4096

// keygen issues keys: 32 random bits from ChaCha8 seeded by crypto/rand, so
// a peer cannot guess the key of a region from keys it has seen. A key is
// never 0, never the key of a live registration, and never one of the last
// quarantineLen keys freed by Deregister or Reregister. Beyond that window a
// freed key comes back only by chance, with probability 2^-32 per
// registration. The quarantine makes sure that a late packet carrying a
// just-freed R_Key cannot reach a region registered right after.
//
// Unlike rxe, whose keys are a pool index with 8 random bits, no bit of a
// key is predictable. The Table's mutex guards a keygen.
type keygen struct {
	src  rand.Source
	ring [quarantineLen]uint32 // freed keys; once full, ring[next] is the oldest
	next int
	n    int                 // keys in ring
	held map[uint32]struct{} // the keys in ring
}

func newKeygen() keygen {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand.Read crashes the program instead)
	return keygen{src: rand.NewChaCha8(seed), held: make(map[uint32]struct{}, quarantineLen)}
}

// issue returns a new key; live reports whether a key is in use.
func (k *keygen) issue(live func(uint32) bool) uint32 {
	for {
		key := uint32(k.src.Uint64() >> 32)
		if key == 0 || live(key) {
			continue
		}
		if _, ok := k.held[key]; ok {
			continue
		}
		return key
	}
}

// retire puts a freed key into quarantine, releasing the oldest if full.
func (k *keygen) retire(key uint32) {
	if k.n == len(k.ring) {
		delete(k.held, k.ring[k.next])
	} else {
		k.n++
	}
	k.ring[k.next] = key
	k.held[key] = struct{}{}
	k.next = (k.next + 1) % len(k.ring)
}
