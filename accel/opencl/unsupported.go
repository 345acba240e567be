//go:build !((linux || darwin) && (amd64 || arm64 || riscv64 || loong64))

package opencl

import (
	"fmt"
	"os"
	"runtime"

	"github.com/reprise-ml/reprise/accel"
)

// EnvLibrary overrides the OpenCL library the backend loads.
const EnvLibrary = "REPRISE_OPENCL_LIBRARY"

func init() { accel.Register(backend{}) }

// backend is the stand-in where purego cannot load OpenCL: it is registered
// so that the name is known, and always unavailable.
type backend struct{}

func (backend) Name() string { return "opencl" }

func (backend) Probe() error {
	what := "searched no library"
	if p := os.Getenv(EnvLibrary); p != "" {
		what = fmt.Sprintf("did not load %s from %s", p, EnvLibrary)
	}
	return fmt.Errorf("opencl: not supported on %s/%s (%s): %w", runtime.GOOS, runtime.GOARCH, what, accel.ErrBackendUnavailable)
}

func (b backend) Devices() ([]accel.DeviceInfo, error) { return nil, b.Probe() }

func (b backend) Open(int, accel.Options) (accel.Device, error) { return nil, b.Probe() }
