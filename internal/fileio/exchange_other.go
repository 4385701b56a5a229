// No atomic exchange of two names outside Linux.

//go:build !linux

package fileio

import (
	"errors"
	"os"
)

// Exchange always fails with errors.ErrUnsupported here (see the Linux
// version).
func Exchange(a, b string) error {
	return &os.LinkError{Op: "exchange", Old: a, New: b, Err: errors.ErrUnsupported}
}
