//go:build !linux

package perftest

// physicalMemory returns 0: unknown here.
func physicalMemory() uint64 { return 0 }
