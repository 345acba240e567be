package llama

import (
	"strings"
	"testing"
)

// A GGUF shape lists the contiguous axis first, a safetensors one the
// outermost: the same matrix is rows × cols either way; a vector is one
// row; more axes are an error naming the tensor.
func TestWeightSetShape(t *testing.T) {
	for _, c := range []struct {
		shape      []int64
		outerFirst bool
		rows, cols int
	}{
		{[]int64{64, 32}, false, 32, 64},
		{[]int64{32, 64}, true, 32, 64},
		{[]int64{7}, false, 1, 7},
		{[]int64{7}, true, 1, 7},
	} {
		w := Weight{Name: "w", File: "f"}
		if err := w.setShape(c.shape, c.outerFirst); err != nil || w.Rows != c.rows || w.Cols != c.cols {
			t.Errorf("setShape(%v, %v): %d × %d, %v; want %d × %d", c.shape, c.outerFirst, w.Rows, w.Cols, err, c.rows, c.cols)
		}
	}
	w := Weight{Name: "blk.0.attn_q.weight", File: "m.gguf"}
	if err := w.setShape([]int64{2, 3, 4}, false); err == nil || !strings.Contains(err.Error(), `"blk.0.attn_q.weight" of m.gguf`) {
		t.Errorf("a 3-axis tensor: %v", err)
	}
	for role, want := range map[string]bool{RoleQ: true, RoleKBias: true, RoleQNorm: true, RoleV: false, RoleVBias: false, RoleO: false, RoleUp: false} {
		if rotary(role) != want {
			t.Errorf("rotary(%s) = %v", role, !want)
		}
	}
}
