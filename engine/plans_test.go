package engine

import (
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
)

// A plan is read as its resource's type: a missing plan is reported by Get
// (and by Lookup's ok), a plan of another type is an error, never a zero.
func TestPlanKeys(t *testing.T) {
	step := newStep(WalkDecode, "", nil, 0, nil)
	if _, err := KVCachePlan.Get(step); err == nil || !strings.Contains(err.Error(), "no plan from resource kv") {
		t.Errorf("a missing KV plan: %v", err)
	}
	if _, ok, err := KVCachePlan.Lookup(step); ok || err != nil {
		t.Errorf("Lookup of a missing plan: ok %v, err %v", ok, err)
	}
	kv := &KVPlan{PageSize: 16}
	step.plans[KVName] = kv
	step.plans[PositionsName] = kv // a plan of the wrong type
	if got, err := KVCachePlan.Get(step); err != nil || got != kv {
		t.Errorf("the KV plan: %v, %v", got, err)
	}
	if _, err := PositionsPlan.Get(step); err == nil || !strings.Contains(err.Error(), "planned a *engine.KVPlan") {
		t.Errorf("a positions plan of the wrong type: %v", err)
	}
	if _, err := batchFor(step, map[string]accel.Tensor{}); err == nil {
		t.Error("a batch built from a plan of the wrong type")
	}
	delete(step.plans, PositionsName)
	b, err := batchFor(step, map[string]accel.Tensor{})
	if err != nil || b.KV != kv || !b.Pos.IsNil() {
		t.Errorf("a batch of a step with only a KV plan: %+v, %v", b, err)
	}
}
