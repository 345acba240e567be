package main

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/model/llama"
	"github.com/reprise-ml/reprise/model/llama2c"
)

// reprise synthetic writes exactly the weights --synthetic runs, in a file
// llama2c reads back whole.
func TestSyntheticWritesTheCheckpoint(t *testing.T) {
	out := filepath.Join(t.TempDir(), "6M.bin")
	code, stdout, stderr := runCLI(t, "synthetic", "--synthetic", "6M", "--seed", "7", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "dim 256") {
		t.Errorf("summary %q does not give the shape", stdout)
	}
	got, err := llama2c.LoadCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := llama.Synthetic("6M", 7)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config != want.Config {
		t.Fatalf("config %+v, want %+v", got.Config, want.Config)
	}
	if !sameWeights(got, want) {
		t.Fatal("the weights read back differ from llama.Synthetic's")
	}
	other, err := llama.Synthetic("6M", 8)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(got.TokenEmbedding, other.TokenEmbedding) {
		t.Fatal("--seed did not reach the weights")
	}
}

// sameWeights reports whether a and b hold the same embedding, final norm
// and layers, element for element: what reflect.DeepEqual says, at a
// fraction of its -race time on 6M floats (reflect reads each one through a
// Value; it was most of this test's time).
func sameWeights(a, b *llama2c.Checkpoint) bool {
	if !slices.Equal(a.TokenEmbedding, b.TokenEmbedding) || !slices.Equal(a.RMSFinal, b.RMSFinal) || len(a.Layers) != len(b.Layers) {
		return false
	}
	for i := range a.Layers {
		la, lb := reflect.ValueOf(a.Layers[i]), reflect.ValueOf(b.Layers[i])
		for f := 0; f < la.NumField(); f++ {
			fa, fb := la.Field(f).Interface(), lb.Field(f).Interface()
			if va, ok := fa.([]float32); ok {
				if !slices.Equal(va, fb.([]float32)) {
					return false
				}
			} else if !reflect.DeepEqual(fa, fb) {
				return false
			}
		}
	}
	return true
}

func TestSyntheticErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--out", filepath.Join(dir, "a.bin")}, 2, "--synthetic"},
		{[]string{"--synthetic", "6M"}, 2, "--out"},
		{[]string{"--synthetic", "7B", "--out", filepath.Join(dir, "b.bin")}, 2, "7B"},
		{[]string{"--synthetic", "6M", "--out", filepath.Join(dir, "no", "such", "c.bin")}, 1, "no such"},
	} {
		code, _, stderr := runCLI(t, append([]string{"synthetic"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%q: exit %d %q, want %d and %q", tc.args, code, stderr, tc.code, tc.msg)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("failed runs left %v behind", left)
	}
}
