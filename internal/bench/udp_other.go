//go:build !linux

package bench

import (
	"errors"
	"io"
)

// udpCeiling needs Linux's UDP_SEGMENT and UDP_GRO.
func udpCeiling(cfg Config, n int64) (mibps, lost float64, err error) {
	return 0, 0, errors.New("the UDP ceiling is measured on Linux only")
}

// floorEnd needs Linux's UDP_SEGMENT and UDP_GRO.
func floorEnd(args []string, stdout io.Writer) error {
	return errors.New("the kernel's floor is measured on Linux only")
}
