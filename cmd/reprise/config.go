package main

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/reprise-ml/reprise/internal/bounded"

	"go.yaml.in/yaml/v3"
)

// maxConfigBytes bounds a --config file: settings are a few lines, and a
// path that names something else (a device, a huge file) must fail at
// once rather than fill memory.
const maxConfigBytes = 1 << 20

// readConfig reads a config file of at most maxConfigBytes.
func readConfig(path string) ([]byte, error) {
	return bounded.ReadFile(path, maxConfigBytes)
}

// setting is one key of a config file, with the line it is on.
type setting struct {
	key, value string
	null       bool
	line       int
}

// parseConfig reads a YAML mapping of settings to single values, in file
// order. Errors name the line at fault.
func parseConfig(data []byte) ([]setting, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(data, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // empty, or only comments
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of settings (key: value), not %s", m.Line, nodeKind(m))
	}
	var out []setting
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a setting's name must be a word, not %s", k.Line, nodeKind(k))
		}
		if at, dup := seen[k.Value]; dup {
			return nil, fmt.Errorf("line %d: %s is set again (first on line %d)", k.Line, k.Value, at)
		}
		seen[k.Value] = k.Line
		st := setting{key: k.Value, line: k.Line}
		switch {
		case v.Kind == yaml.AliasNode && v.Alias != nil && v.Alias.Kind == yaml.ScalarNode:
			v = v.Alias
			fallthrough
		case v.Kind == yaml.ScalarNode:
			st.value, st.null = v.Value, v.Tag == "!!null"
		default:
			return nil, fmt.Errorf("line %d: %s: want a single value, not %s", v.Line, k.Value, nodeKind(v))
		}
		out = append(out, st)
	}
	return out, nil
}

func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.ScalarNode:
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an alias"
}

var yamlLine = regexp.MustCompile(`^yaml: line \d+: `)

// yamlError reports a syntax error at the first line where the text stops
// parsing: the YAML library names the line where the enclosing construct
// began, which for a flat file of settings is often line 1.
func yamlError(data []byte, err error) error {
	msg := yamlLine.ReplaceAllString(err.Error(), "")
	msg = strings.TrimPrefix(msg, "yaml: ")
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var doc yaml.Node
		return yaml.Unmarshal(bytes.Join(lines[:n], nil), &doc) != nil
	}
	// Binary search (a prefix that fails mostly stays failed as it grows):
	// a handful of parses even for a large file.
	n := sort.Search(len(lines), func(n int) bool { return fails(n + 1) }) + 1
	if n > len(lines) {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return fmt.Errorf("line %d: %s", n, msg)
}
