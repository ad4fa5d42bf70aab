//go:build !linux

package udp

import (
	"errors"

	"github.com/goroce/goroce/internal/link"
)

// Link is a link over UDP sockets. It exists only on Linux, which has the
// recvmmsg and sendmmsg calls it is built on.
type Link struct{ link.Sealer }

// Listen returns errors.ErrUnsupported outside Linux.
func Listen(Config) (*Link, error) { return nil, errors.ErrUnsupported }

// Watch, Unwatch and SetWake exist on Linux only; see there.
func (*Link) Watch(int) error     { return errors.ErrUnsupported }
func (*Link) Unwatch(int)         {}
func (*Link) SetWake(func() bool) {}
