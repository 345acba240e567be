package main

import (
	"fmt"

	"github.com/reprise-ml/reprise/chat"
	"github.com/reprise-ml/reprise/internal/bounded"
	"github.com/reprise-ml/reprise/serve"
	"github.com/reprise-ml/reprise/tokenizer"
)

// maxTemplateBytes bounds a --chat-template file (real templates are a few
// KiB).
const maxTemplateBytes = 1 << 20

// templated is what a model's own tokenizer offers a chat template: the
// templates its files carry, and the text of a token (for bos_token and
// eos_token). *tokenizer.Model is one.
type templated interface {
	ChatTemplates() map[string]string
	Token(id int) string
}

// chatTemplate is the template serve renders chat requests through: the
// file --chat-template names, else the model's own (tokenizer_config.json's
// chat_template, GGUF's tokenizer.chat_template); nil when there is
// neither, and the server joins the messages as before.
func chatTemplate(vocab tokenizer.Tokenizer, file string) (*serve.ChatTemplate, error) {
	var src, where string
	if file != "" {
		b, err := bounded.ReadFile(file, maxTemplateBytes)
		if err != nil {
			return nil, fmt.Errorf("--chat-template: %w", err)
		}
		src, where = string(b), file
	}
	t, own := vocab.(templated)
	if src == "" && own {
		var err error
		if src, err = chat.Select(t.ChatTemplates(), ""); err != nil {
			return nil, err
		}
		where = "the model's chat_template"
	}
	if src == "" {
		return nil, nil
	}
	tmpl, err := chat.Compile(src, where)
	if err != nil {
		return nil, err
	}
	ct := &serve.ChatTemplate{Template: tmpl}
	if vocab != nil && own {
		sp := vocab.Special()
		if sp.BOS >= 0 {
			ct.BOS = t.Token(sp.BOS)
		}
		if len(sp.EOS) > 0 {
			ct.EOS = t.Token(sp.EOS[0])
		}
	}
	return ct, nil
}
