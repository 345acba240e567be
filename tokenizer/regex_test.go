package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// \s, \d and \w (and their negations) match Unicode classes, outside a
// character class and, but for the negations, inside one.
func TestCompileRegexpClasses(t *testing.T) {
	for _, c := range []struct {
		pat, text string
		want      []string // nil: the pattern is refused
	}{
		{`\s+`, "a \u3000\tb", []string{" \u3000\t"}},
		{`\S+`, "ab\u00a0日本", []string{"ab", "日本"}},
		{`\d+`, "x12٣4y", []string{"12٣4"}},
		{`\D+`, "x12٣y", []string{"x", "y"}},
		{`\w+`, "é_1 日!", []string{"é_1", "日"}},
		{`\W+`, "a, b!", []string{", ", "!"}},
		{`[\s\d]+`, "a 1٣\tb", []string{" 1٣\t"}},
		{`[\w']+`, "I'M ok", []string{"I'M", "ok"}},
		{`[\S]`, "a", nil},
		{`[\D]`, "a", nil},
		{`[\W]`, "a", nil},
	} {
		m, err := compileRegexp(c.pat)
		if c.want == nil {
			if err == nil || !strings.Contains(err.Error(), "inside a character class") {
				t.Errorf("%s: %v, want it refused", c.pat, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.pat, err)
		}
		if got := m.re.FindAllString(c.text, -1); !slices.Equal(got, c.want) {
			t.Errorf("%s on %q: %q, want %q", c.pat, c.text, got, c.want)
		}
	}
}
