//go:build !amd64 || purego

package prefetch

import "unsafe"

func write(p unsafe.Pointer, lines int) {}

func read(p unsafe.Pointer, lines int) {}
