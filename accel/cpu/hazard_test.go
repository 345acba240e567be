package cpu

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSIMDStructure checks, on the source, the rules that keep the two
// hazards of archsimd code out (see simd.go):
//   - a function that uses vector types or operations (a kernel) is
//     //go:noinline and calls archsimd.ClearAVXUpperBits last, and just
//     before every return;
//   - a kernel holds no scalar float arithmetic: a float32 or float64 value
//     (a parameter, a variable, a dereferenced pointer) appears only as the
//     argument of a broadcast, and there are no float conversions or math
//     calls;
//   - a kernel takes and returns no vector values, so that the functions
//     around the kernels (which never mention archsimd but for CPU feature
//     checks) hold none.
//
// It runs in every build: it reads the files whatever the build tags.
func TestSIMDStructure(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	kernels := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "gen_") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			if !usesVectors(fn) {
				continue // at most archsimd.X86: a feature check
			}
			kernels++
			checkKernel(t, fset, name, fn)
		}
	}
	if vecBuilt != nil && kernels == 0 {
		t.Fatal("no vector kernels found")
	}
	t.Logf("%d vector kernels checked", kernels)
}

// usesVectors: the function refers to archsimd other than archsimd.X86.
func usesVectors(fn ast.Node) bool {
	found := false
	ast.Inspect(fn, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "archsimd" && sel.Sel.Name != "X86" {
				found = true
			}
		}
		return !found
	})
	return found
}

func isClear(s ast.Stmt) bool {
	es, ok := s.(*ast.ExprStmt)
	if !ok {
		return false
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "ClearAVXUpperBits"
}

func isBroadcast(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "archsimd" && strings.HasPrefix(sel.Sel.Name, "Broadcast")
}

func isFloatType(e ast.Expr) bool {
	id, ok := e.(*ast.Ident)
	return ok && (id.Name == "float32" || id.Name == "float64")
}

func checkKernel(t *testing.T, fset *token.FileSet, file string, fn *ast.FuncDecl) {
	name := fn.Name.Name
	noinline := false
	if fn.Doc != nil {
		for _, c := range fn.Doc.List {
			if strings.TrimSpace(c.Text) == "//go:noinline" {
				noinline = true
			}
		}
	}
	if !noinline {
		t.Errorf("%s: vector kernel %s is not //go:noinline", file, name)
	}
	if usesVectors(fn.Type) {
		t.Errorf("%s: vector kernel %s takes or returns vector values", file, name)
	}
	body := fn.Body.List
	if len(body) == 0 {
		t.Errorf("%s: %s: empty kernel", file, name)
		return
	}
	last := body[len(body)-1]
	if _, ret := last.(*ast.ReturnStmt); ret {
		if len(body) < 2 || !isClear(body[len(body)-2]) {
			t.Errorf("%s: %s returns without archsimd.ClearAVXUpperBits just before", file, name)
		}
	} else if !isClear(last) {
		t.Errorf("%s: %s does not end with archsimd.ClearAVXUpperBits", file, name)
	}
	// Every return in the body is preceded by the clear.
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		blk, ok := n.(*ast.BlockStmt)
		if !ok {
			return true
		}
		for i, s := range blk.List {
			if _, ok := s.(*ast.ReturnStmt); ok && (i == 0 || !isClear(blk.List[i-1])) {
				t.Errorf("%s: %s: return at %v without archsimd.ClearAVXUpperBits before it", file, name, fset.Position(s.Pos()))
			}
		}
		return true
	})
	// Scalar floats: the parameters and variables of float type.
	floats := map[string]bool{}
	for _, f := range fn.Type.Params.List {
		if isFloatType(f.Type) {
			for _, n := range f.Names {
				floats[n.Name] = true
			}
		}
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && vs.Type != nil && isFloatType(vs.Type) {
			for _, id := range vs.Names {
				floats[id.Name] = true
			}
		}
		return true
	})
	// Allowed: a float identifier, or *(*float32)(p), directly as the
	// argument of a broadcast.
	allowed := map[ast.Node]bool{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && isBroadcast(call) {
			for _, a := range call.Args {
				allowed[a] = true
			}
		}
		return true
	})
	var bad []string
	visit := func(n ast.Node) bool {
		if n == nil {
			return false
		}
		if allowed[n] {
			return false
		}
		switch x := n.(type) {
		case *ast.Ident:
			if floats[x.Name] {
				bad = append(bad, "scalar float "+x.Name)
			}
		case *ast.StarExpr:
			if p, ok := x.X.(*ast.ParenExpr); ok {
				if conv, ok := p.X.(*ast.CallExpr); ok {
					if pt, ok := conv.Fun.(*ast.ParenExpr); ok {
						if st, ok := pt.X.(*ast.StarExpr); ok && isFloatType(st.X) {
							bad = append(bad, "scalar float load")
						}
					}
				}
			}
		case *ast.CallExpr:
			if isFloatType(x.Fun) {
				bad = append(bad, "float conversion")
			}
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "math" {
					bad = append(bad, "math."+sel.Sel.Name)
				}
			}
		case *ast.BasicLit:
			if x.Kind == token.FLOAT {
				bad = append(bad, "float literal "+x.Value)
			}
		}
		return true
	}
	ast.Inspect(fn.Body, visit)
	for _, b := range bad {
		t.Errorf("%s: vector kernel %s holds scalar float code: %s", file, name, b)
	}
}

// TestGeneratedUpToDate: simd_gen_amd64.go is what gen_simd.go writes,
// simd_gen_avx2_amd64.go what gen_avx2mm.go writes, simd_avx2fma_amd64.s
// and simd_gen_avx2fma_amd64.go what gen_avx2fma.go writes and
// quant_rows_gen_amd64.go what gen_quantrows.go writes.
func TestGeneratedUpToDate(t *testing.T) {
	goTool, err := osexec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	if testing.Short() {
		t.Skip("short")
	}
	for _, g := range [][2]string{{"gen_simd.go", "simd_gen_amd64.go"}, {"gen_avx2mm.go", "simd_gen_avx2_amd64.go"},
		{"gen_avx2fma.go", "simd_gen_avx2fma_amd64.go"}, {"gen_avx2fma.go", "simd_avx2fma_amd64.s"},
		{"gen_avx512fma.go", "simd_gen_avx512fma_amd64.go"}, {"gen_avx512fma.go", "simd_avx512fma_amd64.s"},
		{"gen_quantrows.go", "quant_rows_gen_amd64.go"}} {
		dir := t.TempDir()
		out := filepath.Join(dir, "gen.go")
		args := []string{"run", g[0], "-o", out}
		if strings.HasSuffix(g[1], ".s") {
			out = filepath.Join(dir, "gen.s")
			args = append(args, "-s", out)
		} else if g[0] == "gen_avx2fma.go" || g[0] == "gen_avx512fma.go" {
			args = append(args, "-s", filepath.Join(dir, "gen.s"))
		}
		cmd := osexec.Command(goTool, args...)
		cmd.Env = append(os.Environ(), "GOEXPERIMENT=")
		if msg, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go run %s: %v\n%s", g[0], err, msg)
		}
		want, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		have, err := os.ReadFile(g[1])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, have) {
			t.Fatalf("%s is stale: run `GOEXPERIMENT=simd go generate ./accel/cpu`", g[1])
		}
	}
}
