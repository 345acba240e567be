//go:build !goexperiment.simd

package engine_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// TestAnyPromptReference: anyPromptFile is llama2c.Generate's text of each
// prompt. llama2c.Generate is plain Go, its output the same in every build,
// so only the build without the vector kernels (CI's second -race pass)
// makes it; -rewrite writes the file.
func TestAnyPromptReference(t *testing.T) {
	ck, tok, err := llama.Default()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, p := range prompts {
		want[p] = llama2c.Generate(ck, tok, p, anyPromptSteps)
	}
	golden(t, anyPromptFile, formatAnyPrompt(want))
}

// formatAnyPrompt is anyPromptFile's text for each prompt's reference text.
func formatAnyPrompt(want map[string]string) string {
	var b strings.Builder
	b.WriteString("# llama2c.Generate of stories260K, 120 positions (go test ./engine -run TestAnyPromptReference -rewrite rewrites it)\n")
	for _, p := range prompts {
		fmt.Fprintf(&b, "%s %s\n", strconv.Quote(p), strconv.Quote(want[p]))
	}
	return b.String()
}
