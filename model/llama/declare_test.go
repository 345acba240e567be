package llama

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Models declare, the engine executes: no model source captures, replays,
// orders streams or leases slots itself. Those calls belong to graph and
// engine, which decide what is captured and when; a model that made them
// would break bucket capture, failure isolation and pre-planning behind the
// runner's back. (Launching kernels on the stream it is given is the
// model's job.)
func TestModelsDeclareOnly(t *testing.T) {
	// Names specific enough to mean the accel, graph and engine calls
	// (Record, Wait and Synchronize are left out: a model may wait for its
	// weights' upload at load time, and the names are common).
	forbidden := map[string]bool{
		"BeginCapture": true, "EndCapture": true, "AbortCapture": true, "Capture": true,
		"Instantiate": true, "NewEvent": true, "LeaseSlot": true, "NewStepRunner": true, "NewRunner": true,
	}
	files, err := filepath.Glob("../*/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("model sources: %v %v", files, err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && forbidden[sel.Sel.Name] {
				t.Errorf("%s: a model calls %s", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if checked < 3 {
		t.Fatalf("checked only %d files", checked)
	}
}
