package chat_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reprise-ml/reprise/chat"
)

// What is wrong with the conversation a client sent (not with the
// template) wraps ErrInput, so that a server answers 400, not 500.
func TestBadInputIsErrInput(t *testing.T) {
	tmpl, err := chat.Compile(`{% for m in messages %}{{ m.content }}{% endfor %}`, "test")
	if err != nil {
		t.Fatal(err)
	}
	deep := `[{"role":"user","content":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}]`
	for _, tc := range []struct {
		name string
		in   chat.Input
	}{
		{"not a list", chat.Input{Messages: json.RawMessage(`{"role":"user"}`)}},
		{"truncated", chat.Input{Messages: json.RawMessage(`[{"role":"user"`)}},
		{"too deep", chat.Input{Messages: json.RawMessage(deep)}},
		{"trailing", chat.Input{Messages: json.RawMessage(`[] []`)}},
		{"bad tools", chat.Input{Messages: json.RawMessage(`[]`), Tools: json.RawMessage(`[1,`)}},
		{"bad kwarg", chat.Input{Messages: json.RawMessage(`[]`), Kwargs: map[string]json.RawMessage{"x": json.RawMessage(`{`)}}},
	} {
		_, err := tmpl.Render(tc.in)
		if !errors.Is(err, chat.ErrInput) || errors.Is(err, chat.ErrTemplate) {
			t.Errorf("%s: %v, want an ErrInput (and no ErrTemplate)", tc.name, err)
		}
	}
	// A template failing is not the input's fault.
	bad, err := chat.Compile(`{{ messages[5].content.x.y }}`, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Render(chat.Input{Messages: json.RawMessage(`[]`)}); err != nil && errors.Is(err, chat.ErrInput) {
		t.Errorf("template failure: %v is an ErrInput", err)
	}
}
