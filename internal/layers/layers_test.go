package layers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/reprise-ml/reprise"

// The repository keeps its layering.
func TestRepositoryLayering(t *testing.T) {
	vs, err := Check("../..", module)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Error(v)
	}
}

// plant writes a synthetic module: files by slash-separated path.
func plant(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// The checker finds each kind of planted violation, and only those.
func TestCheckFindsPlantedViolations(t *testing.T) {
	backend := "package fast\nimport \"" + module + "/accel\"\nfunc init() { accel.Register(nil) }\nfunc mine(s string) bool { return s == \"fast\" }\n"
	for _, c := range []struct {
		name  string
		files map[string]string
		want  []string // substrings of the violations, in order; none: clean
	}{
		{"clean", map[string]string{
			"accel/fast/fast.go":      backend,
			"accel/fast/fast_test.go": "package fast\nimport _ \"" + module + "/engine\"\n",
			"graph/g.go":              "package graph\nimport _ \"" + module + "/accel\"\n",
			"engine/e.go":             "package engine\nfunc f(s string) bool { return s == \"slow\" }\n",
		}, nil},
		{"accel imports engine", map[string]string{
			"accel/fast/fast.go":  backend,
			"engine/e.go":         "package engine\nimport _ \"" + module + "/graph\"\n",
			"graph/g.go":          "package graph\nimport _ \"" + module + "/accel\"\n",
			"quant/q.go":          "package quant\nimport _ \"" + module + "/internal/bits\"\n",
			"internal/bits/b.go":  "package bits\n",
			"accel/fast/q.go":     "package fast\nimport _ \"" + module + "/quant\"\n",
			"accel/kit/kit.go":    "package kit\nimport _ \"" + module + "/engine\"\n",
			"accel/fast/other.go": "package fast\nimport _ \"" + module + "/accel/kit\"\n",
		}, []string{"accel/kit (under accel) imports engine"}},
		{"accel imports an internal leaf, not an internal package above", map[string]string{
			"accel/fast/fast.go":    backend,
			"internal/leaf/l.go":    "package leaf\nimport _ \"fmt\"\n",
			"internal/upper/u.go":   "package upper\nimport _ \"" + module + "/engine\"\n",
			"accel/fast/uses.go":    "package fast\nimport _ \"" + module + "/internal/leaf\"\n",
			"accel/fast/uses_up.go": "package fast\nimport _ \"" + module + "/internal/upper\"\n",
		}, []string{"accel/fast (under accel) imports internal/upper"}},
		{"model checks imported by a non-test file", map[string]string{
			"accel/acceltest/modeltest/m.go": "package modeltest\nimport _ \"" + module + "/engine\"\n",
			"accel/fast/fast.go":             backend,
			"accel/fast/fast_test.go":        "package fast\nimport _ \"" + module + "/accel/acceltest/modeltest\"\n",
			"serve/s.go":                     "package serve\nimport _ \"" + module + "/accel/acceltest/modeltest\"\n",
		}, []string{"serve imports accel/acceltest/modeltest, which only tests may"}},
		{"graph imports model", map[string]string{
			"graph/g_test.go": "package graph\nimport _ \"" + module + "/model/llama\"\n",
			"graph/g.go":      "package graph\nimport _ \"" + module + "/serve\"\n",
		}, []string{"graph imports serve", "graph imports model/llama"}},
		{"backend name outside its backend", map[string]string{
			"accel/fast/fast.go": backend,
			"engine/e.go":        "package engine\nfunc f(s string) bool { return \"fast\" != s }\n",
			"serve/s.go":         "package serve\nfunc f(s string) int { switch s { case \"fast\": return 1 }; return 0 }\n",
			"serve/s_test.go":    "package serve\nfunc g(s string) bool { return s == \"fast\" }\n",
		}, []string{"compares with backend name \"fast\"", "switches on backend name \"fast\""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vs, err := Check(plant(t, c.files), module)
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) != len(c.want) {
				t.Fatalf("violations %v, want %d matching %q", vs, len(c.want), c.want)
			}
			for i, w := range c.want {
				if !strings.Contains(vs[i].String(), w) {
					t.Errorf("violation %d is %q, want one saying %q", i, vs[i], w)
				}
			}
		})
	}
}
