package opencl_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/acceltest/modeltest"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/accel/opencl"
)

// The suite compares the device with the CPU device (registered by the
// blank import above) and checks that an executable holds exactly
// ExecBytesPerNode per command.
func TestConformance(t *testing.T) {
	acceltest.Run(t, "opencl", acceltest.Expect{ExecBytesPerNode: opencl.ExecBytesPerNode, ExactExecBytes: true})
	t.Run("ModelReference", func(t *testing.T) { modeltest.Run(t, "opencl") })
}

// open opens OpenCL device 0 with a stream. It skips where OpenCL is not
// usable here (no library, no platform), but fails where a device is listed
// and does not open.
func open(t testing.TB) *acceltest.Env { return acceltest.Open(t, "opencl", accel.Options{}) }

func TestProbeWithoutLibrary(t *testing.T) {
	missing := "/nonexistent/reprise/libOpenCL-missing.so.1"
	t.Setenv(opencl.EnvLibrary, missing)
	err := accel.Probe("opencl")
	if !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Probe with %s=%s: %v, want ErrBackendUnavailable", opencl.EnvLibrary, missing, err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Fatalf("Probe's error does not name the path searched: %v", err)
	}
	if _, err := accel.Open("opencl", 0, accel.Options{}); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Open without the library: %v, want ErrBackendUnavailable", err)
	}
}

func TestProbeDefaultPathsNamed(t *testing.T) {
	if os.Getenv(opencl.EnvLibrary) != "" {
		t.Skip("library overridden")
	}
	if err := accel.Probe("opencl"); err != nil {
		for _, p := range []string{"libOpenCL.so.1", "libOpenCL.so"} {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("Probe's error does not name %s: %v", p, err)
			}
		}
	}
}
