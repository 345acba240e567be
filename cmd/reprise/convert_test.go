package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConvert: llama.cpp's GGUF of stories260K, converted into a Hugging
// Face directory with its vocabulary as tokenizer.json, generates the
// reference text with that tokenizer; bad flags and a directory that is
// already Hugging Face's are refused.
func TestConvert(t *testing.T) {
	want, err := os.ReadFile("../../model/stories260k/testdata/Once_upon_a_time.txt")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("REPRISE_PLAN_CACHE", "off")
	dir := filepath.Join(t.TempDir(), "hf")
	if code, _, errs := runCLI(t, "convert", "--model", storiesGGUF, "--out", dir, "--shards", "2"); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, errs)
	}
	for _, f := range []string{"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json", "model.safetensors.index.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	code, out, errs := runCLI(t, "generate", "--model", dir, "--max-model-len", "512", "--prompt", "Once upon a time", "--graphs", "off", "--device-memory", "512MiB")
	if code != 0 || out != string(want) {
		t.Fatalf("exit %d (%s):\ngot  %q\nwant %q", code, errs, out, want)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--out", dir, "--model", dir}, "already a Hugging Face directory"},
		{[]string{"--out", dir, "--dtype", "f16"}, "want f32 or bf16"},
		{[]string{"--out", dir, "--shards", "0"}, "at least 1"},
		{nil, "needs --out"},
	} {
		if code, _, errs := runCLI(t, append([]string{"convert"}, c.args...)...); code == 0 || !strings.Contains(errs, c.msg) {
			t.Errorf("convert %q: exit %d, %q", c.args, code, errs)
		}
	}
}
