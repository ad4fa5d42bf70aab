package memlink

import (
	"strconv"
	"testing"

	"github.com/goroce/goroce/internal/link/linktest"
)

func BenchmarkMemPair(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			x, y := NewPair(linktest.MustParse("10.0.0.1:4791"), linktest.MustParse("10.0.0.2:4791"))
			defer x.Close()
			defer y.Close()
			linktest.Stream(b, x, y, size)
		})
	}
}
