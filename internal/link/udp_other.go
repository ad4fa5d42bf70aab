//go:build !linux

package link

import (
	"errors"
	"net/netip"

	"github.com/goroce/goroce/internal/netns"
)

// UDPConfig configures ListenUDP; see the Linux documentation.
type UDPConfig struct {
	Addr                    netip.AddrPort
	ReadBuffer, WriteBuffer int
	Interface               netip.Addr
	Fault                   FaultConfig
	NoGSO, SameHost         bool
	NetNS                   *netns.NS
	ReportCE                bool
}

// UDP is a Link over a UDP socket. It exists only on Linux, which has the
// recvmmsg and sendmmsg calls it is built on.
type UDP struct{ Link }

// ListenUDP returns errors.ErrUnsupported outside Linux.
func ListenUDP(UDPConfig) (*UDP, error) { return nil, errors.ErrUnsupported }
