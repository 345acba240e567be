package serve

import (
	"strings"
	"testing"
)

// A stopper releases text as soon as it cannot start a stop sequence, cuts
// at the first match to complete (the earliest start of those ending
// together), however the text is split, and its released text always joins
// to its result.
func TestStopper(t *testing.T) {
	for _, tc := range []struct {
		stops   []string
		pieces  []string
		want    string
		matched bool
	}{
		{nil, []string{"a", "bc", "d"}, "abcd", false},
		{[]string{"cd"}, []string{"a", "bc", "d", "e"}, "ab", true},
		{[]string{"cd"}, []string{"a", "bc", "x", "cd"}, "abcx", true},
		{[]string{"xyz", "c"}, []string{"ab", "xy", "c"}, "abxy", true},
		{[]string{"bcd", "cd"}, []string{"abcd"}, "a", true},
		{[]string{"bcd", "c"}, []string{"abcd"}, "ab", true},
		{[]string{"bcd", "c"}, []string{"a", "bc", "d"}, "ab", true},
		{[]string{" ", "llo w"}, []string{"héllo ", "wöro wld"}, "héllo", true},
		{[]string{" ", "llo w"}, []string{"héllo wöro wld"}, "héllo", true},
		{[]string{"aaa"}, []string{"a", "a", "b", "a", "a", "a"}, "aab", true},
		{[]string{"aab"}, []string{"a", "a", "a", "b"}, "a", true},
		{[]string{"long stop"}, []string{"long", " st", "ory"}, "long story", false},
		{[]string{"\n\n"}, []string{"line\n", "\n", "more"}, "line", true},
	} {
		s := newStopper(tc.stops)
		var released strings.Builder
		matched := false
		for _, p := range tc.pieces {
			out, m := s.add([]byte(p))
			released.WriteString(out)
			// Nothing released may contain or end inside a stop sequence
			// the final text does not hold.
			if m {
				matched = true
				break
			}
		}
		if !matched {
			released.WriteString(s.flush())
		}
		if s.result() != tc.want || released.String() != tc.want || matched != tc.matched {
			t.Errorf("stops %q pieces %q: result %q released %q matched %v; want %q %v",
				tc.stops, tc.pieces, s.result(), released.String(), matched, tc.want, tc.matched)
		}
	}
}

// Holding back: a piece that may start a stop sequence is not released
// until the next piece decides.
func TestStopperHoldsBack(t *testing.T) {
	s := newStopper([]string{"The end"})
	if out, _ := s.add([]byte("so The")); out != "so " {
		t.Errorf("released %q, want %q (\"The\" may start the stop sequence)", out, "so ")
	}
	if out, _ := s.add([]byte(" dog")); out != "The dog" {
		t.Errorf("released %q, want %q", out, "The dog")
	}
	if out, m := s.add([]byte(". The e")); out != ". " || m {
		t.Errorf("released %q %v", out, m)
	}
	if out, m := s.add([]byte("nd!")); out != "" || !m || s.result() != "so The dog. " {
		t.Errorf("released %q %v, result %q", out, m, s.result())
	}
}
