package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/reprise-ml/reprise/model/llama"
)

func init() {
	register(command{name: "inspect", summary: "say what a model file or directory holds: format, architecture, shapes, tensors, tokenizer", run: runInspect})
}

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", stderr)
	asJSON := fs.Bool("json", false, "print JSON")
	// The path may come before or after the flags (which take no values).
	var flags, paths []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			flags = append(flags, a)
		} else {
			paths = append(paths, a)
		}
	}
	if err := parse(fs, flags); err != nil {
		return err
	}
	if len(paths) != 1 {
		return fmt.Errorf("%w: inspect takes one model path (a GGUF file, a Hugging Face directory or a llama2.c checkpoint), not %q", errUsage, paths)
	}
	in, err := llama.Inspect(paths[0])
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "path\t%s\n", in.Path)
	fmt.Fprintf(w, "format\t%s\n", in.Format)
	fmt.Fprintf(w, "architecture\t%s\n", in.Architecture)
	if in.Name != "" {
		fmt.Fprintf(w, "name\t%s\n", in.Name)
	}
	fmt.Fprintf(w, "context length\t%d\n", in.ContextLength)
	if c := in.Config; c != nil {
		fmt.Fprintf(w, "shape\tdim %d, hidden %d, %d layers, %d heads, %d kv heads, head_dim %d, vocab %d\n",
			c.Dim, c.Hidden, c.Layers, c.Heads, c.KVHeads, c.HeadDim, c.Vocab)
		var extra []string
		if c.TiedEmbeddings {
			extra = append(extra, "tied embeddings")
		}
		if c.QKVBias {
			extra = append(extra, "q/k/v biases")
		}
		if c.QKNorm {
			extra = append(extra, "q/k norms")
		}
		if c.RopeScaling != nil {
			extra = append(extra, "rope scaling "+c.RopeScaling.Type)
		}
		if c.SlidingWindow > 0 {
			extra = append(extra, fmt.Sprintf("sliding window %d", c.SlidingWindow))
		}
		fmt.Fprintf(w, "maths\trope theta %g, rms eps %g%s\n", c.RopeTheta, float32(c.NormEps), prefixed(", ", strings.Join(extra, ", ")))
		fmt.Fprintf(w, "parameters\t%d\n", in.Params)
	}
	if in.ConfigError != "" {
		fmt.Fprintf(w, "loads\tno: %s\n", in.ConfigError)
	} else {
		fmt.Fprintf(w, "loads\tyes\n")
	}
	tok := in.Tokenizer
	if tok == "" {
		tok = "none (pass --tokenizer)"
	}
	fmt.Fprintf(w, "tokenizer\t%s\n", tok)
	fmt.Fprintf(w, "chat template\t%v\n", yesNo(in.ChatTemplate))
	fmt.Fprintf(w, "tensors\t%d, %d bytes\n", len(in.Tensors), in.Bytes)
	for _, t := range in.Types {
		fmt.Fprintf(w, "  %s\t%d tensors, %d bytes\n", t.Type, t.Tensors, t.Bytes)
	}
	w.Flush()
	fmt.Fprintln(stdout)
	w = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "tensor\ttype\tshape\tbytes")
	for _, t := range in.Tensors {
		fmt.Fprintf(w, "%s\t%s\t%v\t%d\n", t.Name, t.Type, t.Shape, t.Bytes)
	}
	return w.Flush()
}

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
