package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/ardanlabs/jinja"
)

// ErrTemplate is wrapped by errors about a template that does not compile
// or fails while rendering (other than raise_exception).
var ErrTemplate = errors.New("chat: bad template")

// ErrInput is wrapped by errors about what a client sent (messages,
// tools, chat_template_kwargs that are not JSON of the expected shape, or
// nested too deep): a request error, not a failure of the template.
var ErrInput = errors.New("chat: bad conversation")

// RaiseError is a template's raise_exception: the template refuses the
// conversation with Message.
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return "chat template: " + e.Message }

// Template is a compiled chat template.
type Template struct {
	t      *jinja.Template
	source string
}

// Compile compiles a chat template; source names where it came from
// (a file and field) in errors.
func Compile(src, source string) (*Template, error) {
	t, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w: %v", source, ErrTemplate, err)
	}
	return &Template{t: t, source: source}, nil
}

// Select picks the template to use from a model's named templates: name
// when given, else "default" (a single chat_template string is named
// "default"). It returns "" when there is none.
func Select(templates map[string]string, name string) (string, error) {
	if name != "" {
		t, ok := templates[name]
		if !ok {
			names := make([]string, 0, len(templates))
			for n := range templates {
				names = append(names, n)
			}
			sort.Strings(names)
			return "", fmt.Errorf("chat: no template named %q (have %v)", name, names)
		}
		return t, nil
	}
	return templates["default"], nil
}

// Input is what a template renders. Messages, Tools and each Kwargs value
// are JSON as the client sent it: objects keep their key order.
type Input struct {
	Messages            json.RawMessage // a JSON array of message objects
	Tools               json.RawMessage // a JSON array, or nil
	AddGenerationPrompt bool
	BOS, EOS            string
	// Kwargs are further variables (a request's chat_template_kwargs, such
	// as enable_thinking or date_string); they cannot replace the ones above.
	Kwargs map[string]json.RawMessage
}

// Render renders in through the template.
func (t *Template) Render(in Input) (string, error) {
	vars := map[string]jinja.Value{}
	for k, raw := range in.Kwargs {
		v, err := FromJSON(raw)
		if err != nil {
			return "", fmt.Errorf("chat: chat_template_kwargs.%s: %w: %w", k, ErrInput, err)
		}
		vars[k] = v
	}
	msgs, err := FromJSON(in.Messages)
	if err != nil {
		return "", fmt.Errorf("chat: messages: %w: %w", ErrInput, err)
	}
	if !msgs.IsList() {
		return "", fmt.Errorf("chat: messages: %w: not a list", ErrInput)
	}
	vars["messages"] = msgs
	if len(bytes.TrimSpace(in.Tools)) > 0 && string(bytes.TrimSpace(in.Tools)) != "null" {
		tools, err := FromJSON(in.Tools)
		if err != nil {
			return "", fmt.Errorf("chat: tools: %w: %w", ErrInput, err)
		}
		vars["tools"] = tools
	} else {
		vars["tools"] = jinja.FromGoValue(nil)
	}
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	vars["bos_token"] = jinja.NewString(in.BOS)
	vars["eos_token"] = jinja.NewString(in.EOS)
	// raise_exception records its message, so that the error is typed
	// whatever the engine wraps it in.
	var mu sync.Mutex
	var raised *RaiseError
	vars["raise_exception"] = jinja.NewCallable("raise_exception", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		msg := "raise_exception"
		if len(args) > 0 {
			msg = args[0].String()
			if args[0].IsString() {
				msg = args[0].AsString()
			}
		}
		mu.Lock()
		raised = &RaiseError{Message: msg}
		mu.Unlock()
		return jinja.FromGoValue(nil), raised
	})
	out, err := t.t.RenderValues(vars)
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		if raised != nil {
			return "", raised
		}
		return "", fmt.Errorf("chat: %s: %w: %v", t.source, ErrTemplate, err)
	}
	return out, nil
}

// FromJSON converts JSON to a template value, objects as dicts with their
// keys in order.
func FromJSON(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// maxDepth bounds nesting (a request is at most a few MB; this keeps a
// hostile one from recursing deeply).
const maxDepth = 64

func readValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Value{}, fmt.Errorf("nested more than %d deep", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := readValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				k, _ := kt.(string)
				v, err := readValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", x)
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return jinja.NewInt(n), nil
		}
		f, err := x.Float64()
		if err != nil {
			return jinja.Value{}, err
		}
		return jinja.NewFloat(f), nil
	case string:
		return jinja.NewString(x), nil
	case bool:
		return jinja.NewBool(x), nil
	case nil:
		return jinja.FromGoValue(nil), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}
