package engine

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/accel"
	"github.com/reprise-ml/reprise/graph"
)

// fakeRes records what the step runner asks of it.
type fakeRes struct {
	name   string
	deps   []string
	refuse admitStatus
	log    *[]string
}

func (f *fakeRes) Name() string                    { return f.name }
func (f *fakeRes) DependsOn() []string             { return f.deps }
func (f *fakeRes) Ingest(int64, requestInfo) error { return nil }
func (f *fakeRes) Remove(int64) error              { *f.log = append(*f.log, "remove "+f.name); return nil }
func (f *fakeRes) Reset(int64, bool) error         { return nil }
func (f *fakeRes) Admit(*Step) (admitStatus, int) {
	*f.log = append(*f.log, "admit "+f.name)
	if f.refuse != admitOK {
		return f.refuse, 3
	}
	return admitOK, 0
}
func (f *fakeRes) Unadmit(*Step) { *f.log = append(*f.log, "unadmit "+f.name) }
func (f *fakeRes) Plan(_ accel.Stream, _ *accel.Stager, s *Step) (any, error) {
	*f.log = append(*f.log, "plan "+f.name)
	return f.name + " plan", nil
}
func (f *fakeRes) Commit(*Step) error {
	*f.log = append(*f.log, "commit "+f.name)
	if f.name == "b" {
		return errors.New("b fails to commit")
	}
	return nil
}
func (f *fakeRes) SupportsPrePlan() bool                    { return false }
func (f *fakeRes) ForcesDoubleBuffer() bool                 { return f.name == "c" }
func (f *fakeRes) BuildGraphBuffers([]graph.SlotSpec) error { return nil }
func (f *fakeRes) CanCapture() bool                         { return f.name != "d" }

func TestStepRunnerOrder(t *testing.T) {
	var log []string
	mk := func(name string, deps ...string) *fakeRes { return &fakeRes{name: name, deps: deps, log: &log} }
	// z has no dependencies but sorts last among equals; c depends on z.
	sr, err := newStepRunner(mk("c", "z"), mk("b"), mk("z"), mk("a", "c"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range sr.Resources() {
		order = append(order, r.Name())
	}
	if want := []string{"b", "z", "c", "a"}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v (dependencies first, alphabetical among equals)", order, want)
	}
	if !sr.DoubleBuffer() {
		t.Error("a resource forcing a double buffer should give two slots")
	}
	step := newStep("decode", "", nil, 0, nil)
	if err := sr.Plan(nil, nil, step); err != nil {
		t.Fatal(err)
	}
	if step.plans["a"] != "a plan" || len(step.plans) != 4 {
		t.Fatalf("plans %v", step.plans)
	}
}

func TestStepRunnerBadDependencies(t *testing.T) {
	var log []string
	mk := func(name string, deps ...string) *fakeRes { return &fakeRes{name: name, deps: deps, log: &log} }
	for _, c := range []struct {
		rs   []resource
		want string
	}{
		{[]resource{mk("a", "nope")}, "unknown"},
		{[]resource{mk("a", "a")}, "itself"},
		{[]resource{mk("a", "b"), mk("b", "c"), mk("c", "a"), mk("d")}, "cycle: a, b, c"},
		{[]resource{mk("a"), mk("a")}, "two resources"},
	} {
		if _, err := newStepRunner(c.rs...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error containing %q, got %v", c.want, err)
		}
	}
}

func TestStepRunnerAdmitStopsAtFirstFailure(t *testing.T) {
	var log []string
	a := &fakeRes{name: "a", log: &log}
	b := &fakeRes{name: "b", log: &log, refuse: admitAllocFailed}
	c := &fakeRes{name: "c", log: &log}
	sr, err := newStepRunner(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	err = sr.Admit(newStep("decode", "", nil, 0, nil))
	var ae *admitError
	if !errors.As(err, &ae) || ae.resource != "b" || ae.Status != admitAllocFailed || ae.Short != 3 {
		t.Fatalf("admit error %v", err)
	}
	if want := []string{"admit a", "admit b", "unadmit a"}; !slices.Equal(log, want) {
		t.Fatalf("calls %v, want %v (stop at b, undo a, never ask c)", log, want)
	}
	// Commit and Remove reach every resource even after one fails.
	log = nil
	if err := sr.Commit(newStep("decode", "", nil, 0, nil)); err == nil {
		t.Fatal("a failing commit was not reported")
	}
	if want := []string{"commit a", "commit b", "commit c"}; !slices.Equal(log, want) {
		t.Fatalf("commit reached %v", log)
	}
	log = nil
	sr.Abort(newStep("decode", "", nil, 0, nil))
	if want := []string{"unadmit c", "unadmit b", "unadmit a"}; !slices.Equal(log, want) {
		t.Fatalf("abort reached %v", log)
	}
}

func TestBlockedResources(t *testing.T) {
	var log []string
	sr, _ := newStepRunner(&fakeRes{name: "a", log: &log}, &fakeRes{name: "d", log: &log})
	if got := sr.Blocked("decode"); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("blocked %v", got)
	}
}

// stepsModel declares which resources each walk's step uses.
type stepsModel struct {
	Model
	uses map[string][]string
}

func (m stepsModel) StepResources(walk string) []string { return m.uses[walk] }

// Capture blocking is per declared step, as the seed's
// blocked_capture_resources(step, resources): a resource that cannot be
// captured (d) blocks only the walk whose step uses it, and the step runner
// sweeps a step through its walk's resources only (issue 19, item 9). The
// node used to answer every config with every blocked resource of the
// node, so d kept decode eager too.
func TestCaptureBlockedPerStep(t *testing.T) {
	var log []string
	mk := func(name string, deps ...string) *fakeRes { return &fakeRes{name: name, deps: deps, log: &log} }
	sr, err := newStepRunner(mk("a"), mk("c", "a"), mk("d", "a"))
	if err != nil {
		t.Fatal(err)
	}
	decode, verify := &graph.Config{Walk: "decode"}, &graph.Config{Walk: "verify", ReplayWalks: []string{"check"}}
	m := stepsModel{uses: map[string][]string{"decode": {"c", "a"}, "verify": {"a", "d"}}}
	if err := declareSteps(sr, m, []*graph.Config{decode, verify}); err != nil {
		t.Fatal(err)
	}
	n := newNode(nil, m, sr, nil)
	if got := n.Blocked(decode); len(got) != 0 {
		t.Errorf("decode's step uses a and c, blocked by %v", got)
	}
	if got := n.Blocked(verify); !slices.Equal(got, []string{"d"}) {
		t.Errorf("verify's step uses d, blocked by %v, want [d]", got)
	}
	// A walk that declares nothing uses every resource.
	if got := sr.Blocked("check"); !slices.Equal(got, []string{"d"}) {
		t.Errorf("an undeclared walk is blocked by %v, want [d]", got)
	}
	step := newStep("decode", "", nil, 0, nil)
	if err := sr.Admit(step); err != nil {
		t.Fatal(err)
	}
	if err := sr.Plan(nil, nil, step); err != nil {
		t.Fatal(err)
	}
	sr.Abort(step)
	if want := []string{"admit a", "admit c", "plan a", "plan c", "unadmit c", "unadmit a"}; !slices.Equal(log, want) {
		t.Errorf("a decode step swept %v, want %v", log, want)
	}
	for _, c := range []struct {
		uses map[string][]string
		want string
	}{
		{map[string][]string{"decode": {"c"}}, `uses resource "c" without "a"`},
		{map[string][]string{"decode": {"a", "zz"}}, `unknown resource "zz"`},
	} {
		sr, _ := newStepRunner(mk("a"), mk("c", "a"))
		if err := declareSteps(sr, stepsModel{uses: c.uses}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("declaring %v: %v, want an error containing %q", c.uses, err, c.want)
		}
	}
}

// prePlanRes is a fakeRes whose plan for step N+1 may run while step N
// replays.
type prePlanRes struct{ *fakeRes }

func (prePlanRes) SupportsPrePlan() bool { return true }

// Buckets get two slots (DoubleBuffer) when some resource forces a double
// buffer or supports pre-planning, and one otherwise.
func TestStepRunnerDoubleBuffer(t *testing.T) {
	var log []string
	mk := func(name string) *fakeRes { return &fakeRes{name: name, log: &log} } // only "c" forces a double buffer
	for _, c := range []struct {
		what string
		rs   []resource
		want bool
	}{
		{"a resource forcing a double buffer", []resource{mk("a"), mk("c")}, true},
		{"a resource supporting pre-planning", []resource{mk("a"), prePlanRes{mk("b")}}, true},
		{"neither", []resource{mk("a"), mk("b")}, false},
	} {
		sr, err := newStepRunner(c.rs...)
		if err != nil {
			t.Fatal(err)
		}
		if got := sr.DoubleBuffer(); got != c.want {
			t.Errorf("%s: double buffer %v, want %v", c.what, got, c.want)
		}
	}
}
