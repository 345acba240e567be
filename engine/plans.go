package engine

import (
	"fmt"

	"github.com/reprise-ml/reprise/accel"
)

// PlanKey names one resource's plan and gives its type, so that a reader gets
// the plan as that type or an error: never a silent zero from a misspelt name
// or a mistaken assertion.
type PlanKey[T any] struct{ resource string }

// The engine's resources' plans.
var (
	// PositionsPlan is each token's position ([1, Tokens] I32).
	PositionsPlan = PlanKey[accel.Tensor]{PositionsName}
	// KVCachePlan is each token's KV slot and each row's page table.
	KVCachePlan = PlanKey[*KVPlan]{KVName}
	// SamplerPlan is each row's sampling parameters on the device.
	SamplerPlan = PlanKey[accel.SampleParams]{SamplerName}
)

// Lookup returns the step's plan of k's resource; ok is false when the
// resource did not plan the step (a region plans only the resources it
// reads). A plan of another type is an error.
func (k PlanKey[T]) Lookup(step *Step) (v T, ok bool, err error) {
	p, ok := step.plans[k.resource]
	if !ok {
		return v, false, nil
	}
	if v, ok = p.(T); !ok {
		return v, false, fmt.Errorf("engine: resource %s planned a %T, want %T", k.resource, p, v)
	}
	return v, true, nil
}

// Get returns the step's plan of k's resource, or an error when the resource
// did not plan the step.
func (k PlanKey[T]) Get(step *Step) (T, error) {
	v, ok, err := k.Lookup(step)
	if err == nil && !ok {
		err = fmt.Errorf("engine: step %s has no plan from resource %s", step.Walk, k.resource)
	}
	return v, err
}

// Names of the forward's outputs the engine reads.
const (
	// OutputNext is each row's sampled token ([1, rows] I32); every
	// forward gives it.
	OutputNext = "next"
	// OutputLogits is each row's logits ([rows, vocab] F32), given by models
	// asked for them.
	OutputLogits = "logits"
)
