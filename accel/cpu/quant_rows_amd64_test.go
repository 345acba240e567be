//go:build goexperiment.simd && amd64

package cpu

import "testing"

// TestQuantRowStep: the steps cover every row exactly once, each a size a
// kernel takes, and with a two-row kernel beside a three-row one no row is
// left to the one-row kernel unless it is the only one (with two-row
// kernels alone, as on widened panels, at most the odd one).
func TestQuantRowStep(t *testing.T) {
	for _, c := range []struct {
		rows      int
		many, two bool
	}{{3, true, true}, {2, true, true}, {4, true, false}, {3, false, false}} {
		for n := 1; n <= 40; n++ {
			ones := 0
			for left := n; left > 0; {
				m := quantRowStep(left, c.rows, c.many, c.two)
				switch {
				case m == 1:
					ones++
				case m == 2 && c.two, m == c.rows && c.many:
				default:
					t.Fatalf("%+v n %d: step %d with %d left", c, n, m, left)
				}
				if m > left {
					t.Fatalf("%+v n %d: step %d with %d left", c, n, m, left)
				}
				left -= m
			}
			odd := 0
			if c.rows == 2 {
				odd = n % 2
			}
			if c.two && n > 1 && ones > odd {
				t.Errorf("%+v n %d: %d rows on the one-row kernel", c, n, ones)
			}
		}
	}
}
