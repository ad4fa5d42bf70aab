//go:build !linux

package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
)

// Open fails outside Linux, which alone has network namespaces.
func Open(path string) (*NS, error) {
	return nil, fmt.Errorf("netns: %s: %w", path, errors.ErrUnsupported)
}

// Inode fails outside Linux.
func (n *NS) Inode() (uint64, error) { return 0, errors.ErrUnsupported }

// Do runs fn for the nil NS, the only one there is outside Linux.
func (n *NS) Do(fn func() error) error {
	if n != nil {
		return errors.ErrUnsupported
	}
	return fn()
}

// Veth is two network namespaces joined by a veth pair, on Linux.
type Veth struct {
	NSA, NSB   *NS
	A, B       netip.Addr
	DevA, DevB string
}

// NewVeth fails outside Linux.
func NewVeth(tag string, a, b netip.Prefix, mtu int) (*Veth, error) {
	return nil, fmt.Errorf("netns: veth: %w", errors.ErrUnsupported)
}

// Close does nothing outside Linux.
func (v *Veth) Close() error { return nil }

// Command runs name in this namespace outside Linux, where NewVeth makes
// no Veth to call it on.
func (v *Veth) Command(inB bool, name string, args ...string) *exec.Cmd {
	return exec.Command(name, args...)
}
