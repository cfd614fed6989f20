//go:build !linux

package sandbox

import "errors"

func (p Prepared) setup() (Launch, error) {
	return Launch{}, errors.New("sandboxing needs Linux")
}

func canIDMap() bool { return false }

// ProcMasked is false off Linux.
func ProcMasked() bool { return false }
