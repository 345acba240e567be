package stories260k_test

import (
	"fmt"
	"testing"

	"github.com/reprise-ml/reprise/model/stories260k"
)

// Printed leaves out the first prompt token's piece, decodes every other
// token after the one before it (the prompt's last before the first
// generated), and ends with a newline.
func TestPrinted(t *testing.T) {
	piece := func(prev, id int) []byte { return fmt.Appendf(nil, "[%d>%d]", prev, id) }
	for _, c := range []struct {
		prompt []int
		gen    []int32
		want   string
	}{
		{[]int{1, 7, 9}, []int32{4, 5}, "[1>7][7>9][9>4][4>5]\n"},
		{[]int{1}, []int32{4}, "[1>4]\n"},
		{[]int{1, 7}, nil, "[1>7]\n"},
		{nil, []int32{4}, "[-1>4]\n"},
	} {
		if got := stories260k.Printed(piece, c.prompt, c.gen); got != c.want {
			t.Errorf("Printed(%v, %v) = %q, want %q", c.prompt, c.gen, got, c.want)
		}
	}
}
