//go:build !(linux && (amd64 || arm64))

package cuda

import (
	"fmt"
	"os"
	"runtime"

	"github.com/reprise-ml/reprise/accel"
)

// EnvLibraryPath is a colon-separated list of directories searched first for
// libcuda, NVRTC and cuBLAS (see doc.go).
const EnvLibraryPath = "REPRISE_CUDA_LIBRARY_PATH"

// EnvCUBLAS set to 0, off or false keeps cuBLAS out.
const EnvCUBLAS = "REPRISE_CUDA_CUBLAS"

func init() { accel.Register(backend{}) }

// backend is the stand-in where the CUDA backend is not built (it needs
// Linux on amd64 or arm64): registered so that the name is known, and always
// unavailable.
type backend struct{}

func (backend) Name() string { return "cuda" }

func (backend) Probe() error {
	what := "searched no library"
	if p := os.Getenv(EnvLibraryPath); p != "" {
		what = fmt.Sprintf("did not search %s=%s", EnvLibraryPath, p)
	}
	return fmt.Errorf("cuda: not supported on %s/%s (%s): %w", runtime.GOOS, runtime.GOARCH, what, accel.ErrBackendUnavailable)
}

func (b backend) Devices() ([]accel.DeviceInfo, error) { return nil, b.Probe() }

func (b backend) Open(int, accel.Options) (accel.Device, error) { return nil, b.Probe() }
