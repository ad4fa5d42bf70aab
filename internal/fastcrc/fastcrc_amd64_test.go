//go:build amd64 && !purego

package fastcrc

// impls lists the implementations this CPU can run, fastest last.
func impls() []int {
	l := []int{implNone}
	if hasAVX2 {
		l = append(l, implAVX2)
	}
	if hasAVX512 {
		l = append(l, implAVX512)
	}
	return l
}

var implNames = [...]string{implNone: "stdlib", implAVX2: "avx2", implAVX512: "avx512"}
