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
