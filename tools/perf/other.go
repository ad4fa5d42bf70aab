//go:build !linux

package main

import (
	"fmt"
	"io"
)

// runFloor needs Linux's UDP_SEGMENT and UDP_GRO.
func runFloor(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "perf floor: the kernel's floor is measured on Linux only")
	return 1
}

// runUDPCost needs Linux's UDP_SEGMENT and sendmmsg.
func runUDPCost(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "perf udpcost: the kernel's UDP cost is measured on Linux only")
	return 1
}
