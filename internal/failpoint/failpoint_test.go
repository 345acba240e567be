package failpoint_test

import (
	"testing"

	"github.com/reprise-ml/reprise/internal/failpoint"
)

// Without the build tag every point is a no-op.
func TestCompiledOut(t *testing.T) {
	if failpoint.Enabled {
		t.Skip("built with reprise_failpoints")
	}
	if err := failpoint.Inject(failpoint.Alloc); err != nil {
		t.Fatal(err)
	}
	failpoint.Enter(failpoint.PhaseStep)()
}

func BenchmarkInject(b *testing.B) {
	for b.Loop() {
		if failpoint.Inject(failpoint.Alloc) != nil {
			b.Fatal("fault")
		}
	}
}
