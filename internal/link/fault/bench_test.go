package fault

import (
	"testing"

	"github.com/goroce/goroce/internal/link/linktest"
)

// BenchmarkMemPairFault measures the fault stage's cost over the memory
// pair (compare memlink's BenchmarkMemPair), with 64-byte payloads.
func BenchmarkMemPairFault(b *testing.B) {
	for _, spec := range []string{"ce=1%", "drop=1%,dup=1%,corrupt=1%,ce=1%,seed=1", "reorder=5%,seed=1"} {
		b.Run(spec, func(b *testing.B) {
			x, y := faultPair(b, "IPv4", spec)
			linktest.Stream(b, x, y, 64)
		})
	}
}
