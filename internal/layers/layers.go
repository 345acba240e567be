// Package layers checks reprise's layering (docs/ARCHITECTURE.md): arrows
// point from user to used, never back. Its test runs the check on the
// repository; Check is the checker, tested on planted violations.
//
// The rules:
//   - No package under accel imports a reprise package above accel: one
//     outside accel that, itself or through its imports, imports accel
//     (graph, engine, model, ...). Packages that stand apart from accel
//     (quant, leaves under internal such as internal/failpoint: they import
//     nothing that imports accel) may be used. Test files may import anything (a backend's tests run
//     the model-level checks), and so may accel/acceltest/modeltest, those
//     checks, which only test files may import.
//   - graph never imports engine, model or serve, test files included.
//   - No code outside accel/<backend> compares a string with a backend's
//     name (== or != or a switch case): ask the device's Capability instead.
//     Test files are exempt, and so is accel/acceltest, the conformance suite,
//     which is given a backend's name to test it (and compares devices with
//     the CPU one).
package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// modelTest is the one package under accel that may import above it.
const modelTest = "accel/acceltest/modeltest"

// Violation is one break of a rule, at a file and line.
type Violation struct {
	Pos  string
	Rule string
}

func (v Violation) String() string { return v.Pos + ": " + v.Rule }

// Check walks the module rooted at root (whose path is module) and returns
// every violation, in file order. Backends are the directories directly
// under accel/ that call accel.Register in a non-test file.
func Check(root, module string) ([]Violation, error) {
	type file struct {
		rel  string // slash-separated, relative to root
		dir  string
		test bool
		ast  *ast.File
	}
	fset := token.NewFileSet()
	var files []file
	backends := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		fl := file{rel: rel, dir: filepath.ToSlash(filepath.Dir(rel)), test: strings.HasSuffix(name, "_test.go"), ast: f}
		files = append(files, fl)
		if !fl.test && strings.HasPrefix(fl.dir, "accel/") && strings.Count(fl.dir, "/") == 1 && registers(f) {
			backends[strings.TrimPrefix(fl.dir, "accel/")] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// deps is each package's reprise imports from its non-test files.
	deps := map[string]map[string]bool{}
	exists := map[string]bool{}
	for _, f := range files {
		if f.test {
			continue
		}
		exists[f.dir] = true
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == module || strings.HasPrefix(path, module+"/") {
				if deps[f.dir] == nil {
					deps[f.dir] = map[string]bool{}
				}
				deps[f.dir][strings.TrimPrefix(strings.TrimPrefix(path, module), "/")] = true
			}
		}
	}
	// apart reports whether a package outside accel imports nothing that
	// leads to accel: it is not above accel.
	memo := map[string]bool{}
	var apart func(pkg string, seen map[string]bool) bool
	apart = func(pkg string, seen map[string]bool) bool {
		if pkg == "accel" || strings.HasPrefix(pkg, "accel/") {
			return false
		}
		if !exists[pkg] {
			return false // not here to vouch for: assume the worst
		}
		if v, ok := memo[pkg]; ok {
			return v
		}
		if seen[pkg] {
			return true // a cycle: the compiler refuses it anyway
		}
		seen[pkg] = true
		ok := true
		for d := range deps[pkg] {
			ok = ok && apart(d, seen)
		}
		memo[pkg] = ok
		return ok
	}
	var out []Violation
	at := func(p token.Pos, rule string, args ...any) {
		out = append(out, Violation{Pos: fset.Position(p).String(), Rule: fmt.Sprintf(rule, args...)})
	}
	under := func(dir, top string) bool { return dir == top || strings.HasPrefix(dir, top+"/") }
	for _, f := range files {
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !under(path, module) {
				continue
			}
			target := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
			if under(f.dir, "accel") && !f.test && !under(target, "accel") && f.dir != modelTest && !apart(target, map[string]bool{}) {
				at(imp.Pos(), "%s (under accel) imports %s, above accel", f.dir, target)
			}
			if target == modelTest && !f.test {
				at(imp.Pos(), "%s imports %s, which only tests may", f.dir, target)
			}
			if under(f.dir, "graph") && (under(target, "engine") || under(target, "model") || under(target, "serve")) {
				at(imp.Pos(), "graph imports %s", target)
			}
		}
		if f.test || under(f.dir, "accel/acceltest") {
			continue
		}
		own := ""
		if strings.HasPrefix(f.dir, "accel/") {
			own = strings.SplitN(strings.TrimPrefix(f.dir, "accel/"), "/", 2)[0]
		}
		name := func(e ast.Expr) (string, bool) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return "", false
			}
			s, _ := strconv.Unquote(lit.Value)
			return s, backends[s] && s != own
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BinaryExpr:
				if n.Op != token.EQL && n.Op != token.NEQ {
					return true
				}
				for _, side := range []ast.Expr{n.X, n.Y} {
					if s, ok := name(side); ok {
						at(n.Pos(), "compares with backend name %q outside accel/%s: ask the Capability", s, s)
					}
				}
			case *ast.CaseClause:
				for _, e := range n.List {
					if s, ok := name(e); ok {
						at(e.Pos(), "switches on backend name %q outside accel/%s: ask the Capability", s, s)
					}
				}
			}
			return true
		})
	}
	slices.SortStableFunc(out, func(a, b Violation) int { return strings.Compare(a.Pos, b.Pos) })
	return out, nil
}

// registers reports whether f calls accel.Register.
func registers(f *ast.File) bool {
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Register" {
				if x, ok := s.X.(*ast.Ident); ok && x.Name == "accel" {
					found = true
				}
			}
		}
		return !found
	})
	return found
}
