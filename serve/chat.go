package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/reprise-ml/reprise/chat"
)

// ChatTemplate is how a server turns a chat request into its prompt: the
// model's Jinja template with the model's BOS and EOS texts.
type ChatTemplate struct {
	Template *chat.Template
	// BOS and EOS are the texts the template gets as bos_token and
	// eos_token ("" when the model has none).
	BOS, EOS string
}

// chatExtra is what a chat request gives a template besides its messages.
type chatExtra struct {
	addGenerationPrompt *bool
	kwargs              map[string]json.RawMessage
}

// Chat request parameters only a template uses (as vLLM takes them).
func init() {
	chatFields["add_generation_prompt"] = func(p *genParams, name string, raw json.RawMessage) *apiError {
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return typeError(name, "a boolean", raw)
		}
		p.chatExtra.addGenerationPrompt = &b
		return nil
	}
	chatFields["chat_template_kwargs"] = func(p *genParams, name string, raw json.RawMessage) *apiError {
		var kw map[string]json.RawMessage
		if jsonKind(raw) != "an object" || json.Unmarshal(raw, &kw) != nil {
			return typeError(name, "an object", raw)
		}
		p.chatExtra.kwargs = kw
		return nil
	}
}

// render runs the template over a parsed chat request. A template's
// raise_exception is a 400 carrying the template's message.
func (c *ChatTemplate) render(p *genParams) (string, *apiError) {
	in := chat.Input{Messages: p.messages, AddGenerationPrompt: true, BOS: c.BOS, EOS: c.EOS, Kwargs: p.chatExtra.kwargs}
	if p.chatExtra.addGenerationPrompt != nil {
		in.AddGenerationPrompt = *p.chatExtra.addGenerationPrompt
	}
	text, err := c.Template.Render(in)
	if err != nil {
		var re *chat.RaiseError
		if errors.As(err, &re) {
			return "", badRequest("messages", codeInvalidValue, "%s", re.Message)
		}
		if errors.Is(err, chat.ErrInput) {
			// The client's messages, tools or kwargs, not the template.
			return "", badRequest("messages", codeInvalidValue, "%v", err)
		}
		return "", &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "chat_template_error",
			message: fmt.Sprintf("the model's chat template failed on these messages: %v", err)}
	}
	return text, nil
}

// writesBOS reports whether a rendered prompt starts with BOS already, so
// that encoding must not add another.
func (c *ChatTemplate) writesBOS(text string) bool {
	return c.BOS != "" && strings.HasPrefix(text, c.BOS)
}

// chatTemplateKind is /v1/models' chat_template: how messages become a
// prompt.
func (s *Server) chatTemplateKind() string {
	if s.opts.Chat != nil {
		return "model"
	}
	return "none: message contents are joined with newlines"
}
