//go:build !linux

package targets

import (
	"errors"
	"io"
)

// floorEnd needs Linux's UDP_SEGMENT and UDP_GRO.
func floorEnd(args []string, stdout io.Writer) error {
	return errors.New("the kernel's floor is measured on Linux only")
}
