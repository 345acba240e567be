package accel

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTopology(t *testing.T) {
	type n struct {
		kind uint8
		op   Op
	}
	sig := func(x *n) NodeSig { return NodeSig{Kind: x.kind, Op: x.op} }
	have := Topology([]n{{1, OpAdd}, {2, 0}, {1, OpMatMul}}, sig)
	if err := CheckTopology(Topology([]n{{1, OpAdd}, {2, 0}, {1, OpMatMul}}, sig), have); err != nil {
		t.Fatalf("equal topologies: %v", err)
	}
	for _, c := range []struct {
		got  []n
		says string
	}{
		{[]n{{1, OpAdd}, {2, 0}}, "2 nodes, executable has 3"},
		{[]n{{1, OpAdd}, {2, 0}, {1, OpSiLUMul}}, "node 2 is kind 1 (silu_mul), executable's is kind 1 (matmul)"},
		{[]n{{1, OpAdd}, {3, 0}, {1, OpMatMul}}, "node 1 is kind 3, executable's is kind 2"},
	} {
		err := CheckTopology(Topology(c.got, sig), have)
		if !errors.Is(err, ErrTopologyChanged) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v against %v: %v, want ErrTopologyChanged saying %q", c.got, have, err, c.says)
		}
	}
}

type testMem struct{ n int64 }

func (m *testMem) Size() int64 { return m.n }

// Validate refuses an operand that does not start on an element boundary.
func TestValidateAlignment(t *testing.T) {
	y := Tensor{Buf: NewBuffer(&testMem{8}, 0, 8), DType: F32, Rows: 1, Cols: 2}
	x := Tensor{Buf: NewBuffer(&testMem{8}, 0, 8), DType: F32, Rows: 1, Cols: 2}
	wm := &testMem{64}
	for _, c := range []struct {
		off int64
		dt  DType
		ok  bool
	}{{0, F32, true}, {4, F32, true}, {2, F32, false}, {1, F32, false}, {2, BF16, true}, {1, BF16, false}} {
		w := Tensor{Buf: NewBuffer(wm, c.off, 16), DType: c.dt, Rows: 2, Cols: 2}
		call := &Call{Op: OpMatMul}
		call.T[0], call.T[1], call.T[2] = y, x, w
		err := call.Validate()
		if c.ok && err != nil {
			t.Errorf("%s weights at byte %d: %v", c.dt, c.off, err)
		}
		if !c.ok && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s weights at byte %d: %v, want ErrInvalidArgument", c.dt, c.off, err)
		}
	}
}
