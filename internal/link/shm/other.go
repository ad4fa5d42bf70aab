//go:build !linux

package shm

import (
	"errors"

	"github.com/goroce/goroce/internal/link"
)

// Mux exists only on Linux (memfd, eventfd, SCM_RIGHTS).
type Mux struct{ link.Link }

// New returns errors.ErrUnsupported outside Linux.
func New(Inner, Config) (*Mux, error) { return nil, errors.ErrUnsupported }
