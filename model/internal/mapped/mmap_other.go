//go:build !unix

package mapped

import (
	"errors"
	"os"
)

func mmap(*os.File, int) ([]byte, func([]byte) error, error) {
	return nil, nil, errors.New("no memory mapping on this platform")
}

func drop(all, b []byte) {}

// populate has nothing to do: without a mapping the bytes were read.
func populate(all, b []byte) {}
