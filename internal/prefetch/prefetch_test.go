//go:build linux

package prefetch

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestNeverFaults: a prefetch is a hint, whatever it covers: a request
// that runs from the last line of a page into one that is not accessible
// does not fault, counts of zero or less ask for nothing, and neither
// does ReadSlice of a page's last bytes or of nothing.
func TestNeverFaults(t *testing.T) {
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[page:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	last := unsafe.Pointer(&mem[page-LineSize])
	Write(last, 8)
	Read(last, 8)
	Write(last, 0)
	Read(last, -1)
	ReadSlice(mem[page-10 : page])  // the last bytes: one line
	ReadSlice(mem[page-100 : page]) // two lines, from the middle of one
	ReadSlice(nil)
	mem[page-1] = 1 // the accessible page is still there to use
}
