package serve

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/reprise-ml/reprise/tokenizer"
)

// Paths of the tokenizer endpoints (vLLM's, outside /v1: no API key).
const (
	pathTokenize   = "/tokenize"
	pathDetokenize = "/detokenize"
)

// FromTokenizer adapts a tokenizer.Tokenizer to the server's Tokenizer:
// Encode's bos adds what the model adds around an input, SafePiece decodes
// control tokens to nothing.
func FromTokenizer(t tokenizer.Tokenizer) Tokenizer { return textTokenizer{t} }

type textTokenizer struct{ t tokenizer.Tokenizer }

func (x textTokenizer) Encode(text string, bos, eos bool) []int {
	ids := x.t.Encode(text, bos)
	if s := x.t.Special(); eos && !bos && len(s.EOS) > 0 {
		ids = append(ids, s.EOS[0])
	}
	return ids
}

func (x textTokenizer) SafePiece(prev, token int) []byte {
	if x.t.IsControl(token) {
		return nil
	}
	return x.t.Piece(prev, token)
}

func (x textTokenizer) MaxBytesPerToken() int { return x.t.MaxBytesPerToken() }

func (x textTokenizer) IsControl(id int) bool { return x.t.IsControl(id) }

func (x textTokenizer) Piece(prev, id int) []byte { return x.t.Piece(prev, id) }

// handleTokenize answers POST /tokenize as vLLM does: {"prompt": TEXT,
// "add_special_tokens": true} or {"messages": [...],
// "add_generation_prompt": true} (rendered through the chat template) ->
// {"tokens": [...], "count": N, "max_model_len": M}.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var obj map[string]json.RawMessage
	if jsonKind(body) != "an object" || json.Unmarshal(body, &obj) != nil {
		writeError(w, badRequest("", codeInvalidJSON, "the request body must be a JSON object"))
		return
	}
	var text string
	bos := true
	if raw, ok := obj["add_special_tokens"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &bos) != nil {
			writeError(w, typeError("add_special_tokens", "a boolean", raw))
			return
		}
	}
	_, hasPrompt := obj["prompt"]
	_, hasMessages := obj["messages"]
	switch {
	case hasPrompt == hasMessages:
		writeError(w, badRequest("prompt", codeMissing, "give exactly one of 'prompt' and 'messages'"))
		return
	case hasPrompt:
		if err := json.Unmarshal(obj["prompt"], &text); err != nil {
			writeError(w, typeError("prompt", "a string", obj["prompt"]))
			return
		}
	default:
		p := &genParams{chat: true}
		if aerr := parseMessages(p, "messages", obj["messages"]); aerr != nil {
			writeError(w, aerr)
			return
		}
		for _, k := range []string{"add_generation_prompt", "chat_template_kwargs"} {
			if raw, ok := obj[k]; ok && !isNull(raw) {
				if aerr := chatFields[k](p, k, raw); aerr != nil {
					writeError(w, aerr)
					return
				}
			}
		}
		text = p.text
		if s.opts.Chat != nil {
			var aerr *apiError
			if text, aerr = s.opts.Chat.render(p); aerr != nil {
				writeError(w, aerr)
				return
			}
			bos = bos && !s.opts.Chat.writesBOS(text)
		}
	}
	if err := r.Context().Err(); err != nil {
		return
	}
	ids := s.tok.Encode(text, bos, false)
	if ids == nil {
		ids = []int{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": ids, "count": len(ids), "max_model_len": s.info.MaxSeq})
}

// handleDetokenize answers POST /detokenize: {"tokens": [...]} ->
// {"prompt": TEXT}.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	body, aerr := s.readBody(w, r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	var req struct {
		Tokens *[]int `json:"tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if jsonKind(body) != "an object" || dec.Decode(&req) != nil {
		writeError(w, badRequest("tokens", codeInvalidValue, "the body must be {\"tokens\": [ids]}"))
		return
	}
	if req.Tokens == nil {
		writeError(w, badRequest("tokens", codeMissing, "you must provide a 'tokens' parameter"))
		return
	}
	control, _ := s.tok.(interface{ IsControl(int) bool })
	// The raw pieces where the tokenizer has them: SafePiece leaves out the
	// bytes the reference program does not print.
	piece := s.tok.SafePiece
	if p, ok := s.tok.(interface{ Piece(prev, id int) []byte }); ok {
		piece = p.Piece
	}
	var b []byte
	prev := -1
	for i, id := range *req.Tokens {
		if id < 0 || id >= s.info.Vocab {
			writeError(w, badRequest("tokens", codeInvalidValue, "'tokens[%d]' is %d, outside the vocabulary of %d", i, id, s.info.Vocab))
			return
		}
		if control == nil || !control.IsControl(id) {
			b = append(b, piece(prev, id)...)
		}
		prev = id
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": string(bytes.ToValidUTF8(b, []byte("\uFFFD")))})
}
