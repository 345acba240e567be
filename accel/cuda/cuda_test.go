package cuda_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/acceltest/modeltest"
	_ "github.com/reprise-ml/reprise/accel/cpu"
	"github.com/reprise-ml/reprise/accel/cuda"
)

// The suite compares the device with the CPU device (registered by the
// blank import above) and checks that an executable holds at least
// ExecBytesPerNode per operation.
func TestConformance(t *testing.T) {
	acceltest.Run(t, "cuda", acceltest.Expect{ExecBytesPerNode: cuda.ExecBytesPerNode})
	t.Run("ModelReference", func(t *testing.T) { modeltest.Run(t, "cuda") })
}

// open opens CUDA device 0 with a stream. It skips where there is no CUDA
// driver or device here, and fails where a device is listed but does not
// open.
func open(t testing.TB) *acceltest.Env { return acceltest.Open(t, "cuda", accel.Options{}) }

// Without the driver, Probe fails with ErrBackendUnavailable and names every
// path it searched. (Here, on a machine with CUDA, the library is found and
// the test says so.)
func TestProbeWithoutLibrary(t *testing.T) {
	empty := t.TempDir()
	t.Setenv(cuda.EnvLibraryPath, empty)
	err := accel.Probe("cuda")
	if err == nil {
		t.Skipf("libcuda is installed here (found outside %s=%s)", cuda.EnvLibraryPath, empty)
	}
	if !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Probe without libcuda: %v, want ErrBackendUnavailable", err)
	}
	for _, p := range []string{empty + "/libcuda.so.1", empty + "/libcuda.so", "libcuda.so.1", "libcuda.so", cuda.EnvLibraryPath} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("Probe's error does not name %s: %v", p, err)
		}
	}
	if _, err := accel.Open("cuda", 0, accel.Options{}); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Open without the library: %v, want ErrBackendUnavailable", err)
	}
	b, _ := accel.Lookup("cuda")
	if _, err := b.Devices(); !errors.Is(err, accel.ErrBackendUnavailable) {
		t.Fatalf("Devices without the library: %v, want ErrBackendUnavailable", err)
	}
}

func TestRegistered(t *testing.T) {
	if _, err := accel.Lookup("cuda"); err != nil {
		t.Fatal(err)
	}
}

// The capability and memory of an opened device (the conformance suite
// checks the device list).
func TestCapability(t *testing.T) {
	e := open(t)
	c := e.Dev.Capability()
	if !c.Available || !c.GraphCapture || !c.GraphUpdate || !c.PinnedMemory || c.Deterministic || c.ComputeUnits <= 0 || c.MemoryTotal <= 0 {
		t.Errorf("capability %+v", c)
	}
	t.Logf("opened: %s; %+v", e.Dev.Info().Detail, c)
	mi := e.Dev.MemInfo()
	if mi.Total != c.MemoryTotal || mi.Free <= 0 || mi.Free > mi.Total {
		t.Errorf("MemInfo %+v", mi)
	}
}

// Skipped unless asked: the search on a machine with the toolkit installed.
func TestLibraryReport(t *testing.T) {
	if os.Getenv("REPRISE_CUDA_REPORT") == "" {
		t.Skip("set REPRISE_CUDA_REPORT=1 to print what was loaded")
	}
	e := open(t)
	t.Logf("%s", e.Dev.Info().Detail)
}
