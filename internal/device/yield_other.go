//go:build !linux

package device

// yieldThread does nothing outside Linux, where goroce's only links are
// in memory and a device's peers are goroutines of the same process.
func yieldThread() {}

// moveThread does nothing outside Linux.
func moveThread() bool { return false }
