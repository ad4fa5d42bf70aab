//go:build !linux

package ntcopy

// LastLevelCache returns 0: the cache size is known only on Linux.
func LastLevelCache() int { return 0 }
