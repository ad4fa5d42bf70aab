//go:build !linux

package bench

import "errors"

// udpCeiling needs Linux's UDP_SEGMENT and UDP_GRO.
func udpCeiling(cfg Config, n int64) (mibps, lost float64, err error) {
	return 0, 0, errors.New("the UDP ceiling is measured on Linux only")
}
