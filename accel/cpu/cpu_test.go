package cpu_test

import (
	"testing"

	"github.com/reprise-ml/reprise/accel/acceltest"
	"github.com/reprise-ml/reprise/accel/acceltest/modeltest"
	"github.com/reprise-ml/reprise/accel/cpu"
)

func TestConformance(t *testing.T) {
	acceltest.Run(t, "cpu", acceltest.Expect{ExecBytesPerNode: cpu.ExecBytesPerNode, ExactExecBytes: true})
	t.Run("ModelReference", func(t *testing.T) { modeltest.Run(t, "cpu") })
}
