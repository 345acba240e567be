package cpu

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAsmStructure is TestSIMDStructure's rule for the Go assembly kernels
// (gen_avx2fma.go's and gen_avx512fma.go's): Go inserts no VZEROUPPER
// after an assembly function either, so each function that touches the
// vector registers' upper halves (a Y or Z register) executes VZEROUPPER
// just before every RET, and none uses a legacy-SSE instruction (an X
// register without the VEX encoding), which would stall on its own dirty
// upper state. It reads the files whatever the build tags.
func TestAsmStructure(t *testing.T) {
	files, err := filepath.Glob("*.s")
	if err != nil {
		t.Fatal(err)
	}
	wide := regexp.MustCompile(`\b[YZ]([0-9]|[12][0-9]|3[01])\b`)
	xmm := regexp.MustCompile(`\bX([0-9]|[12][0-9]|3[01])\b`)
	funcs := 0
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, fn := range strings.Split(string(src), "\nTEXT ")[1:] {
			fname, _, _ := strings.Cut(fn, "(")
			var body []string // instructions, without comments and labels
			for _, l := range strings.Split(fn, "\n")[1:] {
				l, _, _ = strings.Cut(l, "//")
				l = strings.TrimSpace(l)
				if l == "" || strings.HasSuffix(l, ":") || strings.HasPrefix(l, "#") {
					continue
				}
				body = append(body, l)
			}
			usesWide := false
			for i, ins := range body {
				op, args, _ := strings.Cut(ins, " ")
				if wide.MatchString(args) {
					usesWide = true
				}
				if xmm.MatchString(args) && !strings.HasPrefix(op, "V") {
					t.Errorf("%s: %s: %q is a legacy-SSE instruction", name, fname, ins)
				}
				if op == "RET" && usesWide && (i == 0 || body[i-1] != "VZEROUPPER") {
					t.Errorf("%s: %s returns without VZEROUPPER just before RET", name, fname)
				}
			}
			funcs++
		}
	}
	t.Logf("%d assembly functions checked", funcs)
}
