package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/reprise-ml/reprise/engine"
)

// genParams is a completion or chat request after parsing: everything the
// server needs, nothing the engine has seen yet.
type genParams struct {
	chat  bool
	model string
	// text is the prompt (completions) or the chat template's output.
	text string
	// messages is a chat request's messages array as sent, chatExtra the
	// rest of what a chat template takes (chat.go).
	messages  json.RawMessage
	chatExtra chatExtra
	// maxTokens is 0 when the request did not say.
	maxTokens    int
	maxTokensArg string // the parameter that set maxTokens, for errors
	temperature  float64
	tempSet      bool
	topP         float64
	topK         int
	seed         int64
	seedSet      bool
	stop         []string
	stream       bool
	includeUsage bool
	streamOpts   bool // stream_options was given (and not null)
	// promptIDs is a prompt given as tokens (taken as they are: no BOS is
	// added); nil for a text prompt.
	promptIDs []int
	// n is the number of choices (0: not given, 1).
	n int
	// bestOf is best_of (0: not given): with more than n, that many
	// candidates run and the n of the highest cumulative log-probability
	// are returned (bestof.go).
	bestOf int
	echo   bool
	// stopTokens end a choice when sampled (stop_token_ids).
	stopTokens []int
	ignoreEOS  bool
	// logprobs asks for each token's log-probability, and topLogprobs
	// for the most likely alternatives'.
	logprobs    bool
	topLogprobs int
	// pen is the logit processing (penalties.go).
	pen engine.Penalties
}

// maxChoices caps n: each choice is a request of its own in the engine.
const maxChoices = 16

// maxStops is how many stop sequences a request may give (as OpenAI).
const maxStops = 4

type fieldFunc func(p *genParams, name string, raw json.RawMessage) *apiError

// Parameters both endpoints take.
var commonFields = map[string]fieldFunc{
	"model":              parseModel,
	"max_tokens":         parseMaxTokens,
	"temperature":        parseTemperature,
	"top_p":              parseTopP,
	"top_k":              parseTopK,
	"seed":               parseSeed,
	"stop":               parseStop,
	"stream":             boolField(func(p *genParams) *bool { return &p.stream }),
	"stream_options":     parseStreamOptions,
	"n":                  intField(1, maxChoices, func(p *genParams) *int { return &p.n }),
	"stop_token_ids":     parseStopTokenIDs,
	"ignore_eos":         boolField(func(p *genParams) *bool { return &p.ignoreEOS }),
	"presence_penalty":   float32Field(-2, 2, func(p *genParams) *float32 { return &p.pen.Presence }),
	"frequency_penalty":  float32Field(-2, 2, func(p *genParams) *float32 { return &p.pen.Frequency }),
	"repetition_penalty": parseRepetition,
	"logit_bias":         parseLogitBias,
	"min_p":              float32Field(0, 1, func(p *genParams) *float32 { return &p.pen.MinP }),
	"min_tokens":         parseMinTokens,
	// Harmless: they do not change what is generated.
	"user":                   ignoreString,
	"metadata":               ignoreObject,
	"store":                  ignoreBool,
	"service_tier":           ignoreString,
	"prompt_cache_key":       ignoreString,
	"prompt_cache_retention": ignoreString,
	"safety_identifier":      ignoreString,
}

// Parameters of POST /v1/completions only.
var completionFields = merge(commonFields, map[string]fieldFunc{
	"prompt":                parsePrompt,
	"max_completion_tokens": parseMaxTokens,
	"best_of":               intField(1, maxChoices, func(p *genParams) *int { return &p.bestOf }),
	"echo":                  boolField(func(p *genParams) *bool { return &p.echo }),
	"suffix":                mustBeEmptyString,
	"logprobs":              parseCompletionLogprobs,
})

// Parameters of POST /v1/chat/completions only.
var chatFields = merge(commonFields, map[string]fieldFunc{
	"messages":              parseMessages,
	"max_completion_tokens": parseMaxTokens,
	"logprobs":              boolField(func(p *genParams) *bool { return &p.logprobs }),
	"top_logprobs":          intField(0, maxLogprobs, func(p *genParams) *int { return &p.topLogprobs }),
	"tools":                 mustBeEmptyArray("this server has no tools"),
	"functions":             mustBeEmptyArray("this server has no tools"),
	"tool_choice":           noneOrAuto,
	"function_call":         noneOrAuto,
	"parallel_tool_calls":   ignoreBool,
	"response_format":       textFormat,
	"modalities":            textModality,
	"audio":                 unsupported("audio output is not supported"),
	"prediction":            unsupported("predicted outputs are not supported"),
	"web_search_options":    unsupported("web search is not supported"),
	"reasoning_effort":      unsupported("the model does not reason"),
	"verbosity":             unsupported("verbosity is not supported"),
})

// boolField, intField and float32Field are the fieldFuncs of parameters
// that set one field after a type (and range) check.
func boolField(field func(*genParams) *bool) fieldFunc {
	return func(p *genParams, name string, raw json.RawMessage) *apiError {
		b, err := asBool(name, raw)
		*field(p) = b
		return err
	}
}

func intField(lo, hi int64, field func(*genParams) *int) fieldFunc {
	return func(p *genParams, name string, raw json.RawMessage) *apiError {
		n, err := intIn(name, raw, lo, hi)
		*field(p) = n
		return err
	}
}

func float32Field(lo, hi float64, field func(*genParams) *float32) fieldFunc {
	return func(p *genParams, name string, raw json.RawMessage) *apiError {
		f, err := penaltyNumber(name, raw, lo, hi)
		*field(p) = float32(f)
		return err
	}
}

func merge(a, b map[string]fieldFunc) map[string]fieldFunc {
	m := map[string]fieldFunc{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

// parseRequest decodes a request body into genParams, refusing what is
// malformed, unknown or would change results in a way the server does not
// implement. Fields are checked in name order, so the error is stable.
func parseRequest(body []byte, chat bool) (*genParams, *apiError) {
	// What the body is, in the client's terms, before Go's ("cannot
	// unmarshal array into Go value of type map[string]json.RawMessage").
	if k := jsonKind(body); k != "an object" && k != "nothing" && k != "null" && json.Valid(body) {
		return nil, badRequest("", codeInvalidJSON, "the request body must be a JSON object, not %s", k)
	}
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&obj); err != nil || obj == nil {
		msg := "the request body must be a JSON object"
		if err != nil {
			msg = fmt.Sprintf("could not parse the JSON body of the request: %v", err)
		}
		return nil, badRequest("", codeInvalidJSON, "%s", msg)
	}
	if dec.More() {
		return nil, badRequest("", codeInvalidJSON, "could not parse the JSON body of the request: data after the JSON object")
	}
	if path, dup := duplicateKey(body); dup {
		return nil, badRequest(path, codeInvalidJSON, "the request body gives '%s' more than once", path)
	}
	fields, required := completionFields, "prompt"
	if chat {
		fields, required = chatFields, "messages"
	}
	p := &genParams{chat: chat, topP: 1}
	keys := slices.Sorted(maps.Keys(obj))
	for _, k := range keys {
		f := fields[k]
		if f == nil {
			return nil, badRequest(k, codeUnknownParameter, "unrecognized request argument supplied: %s", k)
		}
		if isNull(obj[k]) {
			continue
		}
		if err := f(p, k, obj[k]); err != nil {
			return nil, err
		}
	}
	if raw, ok := obj[required]; !ok || isNull(raw) {
		return nil, badRequest(required, codeMissing, "you must provide a '%s' parameter", required)
	}
	if mt, mct := obj["max_tokens"], obj["max_completion_tokens"]; mt != nil && mct != nil && !isNull(mt) && !isNull(mct) {
		// Both were parsed as integers above.
		var a, b int64
		json.Unmarshal(mt, &a)
		json.Unmarshal(mct, &b)
		if a != b {
			return nil, badRequest("max_completion_tokens", codeInvalidValue,
				"'max_tokens' (%d) and 'max_completion_tokens' (%d) disagree; give one of them", a, b)
		}
	}
	if chat && p.topLogprobs > 0 && !p.logprobs {
		return nil, badRequest("top_logprobs", codeInvalidValue, "'top_logprobs' needs 'logprobs' to be true")
	}
	if p.bestOf > 0 && p.bestOf < max(p.n, 1) {
		return nil, badRequest("best_of", codeInvalidValue, "'best_of' (%d) must be at least 'n' (%d)", p.bestOf, max(p.n, 1))
	}
	if p.bestOf > max(p.n, 1) && p.stream {
		return nil, badRequest("best_of", codeInvalidValue, "'best_of' greater than 'n' cannot be streamed: the best are known only at the end")
	}
	if p.streamOpts && !p.stream {
		return nil, badRequest("stream_options", codeInvalidValue, "'stream_options' is only allowed when 'stream' is true")
	}
	return p, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// jsonKind names a JSON value's type for error messages.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func typeError(name, want string, raw json.RawMessage) *apiError {
	return badRequest(name, codeInvalidType, "'%s' must be %s, not %s", name, want, jsonKind(raw))
}

func asString(name string, raw json.RawMessage) (string, *apiError) {
	var s string
	if jsonKind(raw) != "a string" || json.Unmarshal(raw, &s) != nil {
		return "", typeError(name, "a string", raw)
	}
	return s, nil
}

func asBool(name string, raw json.RawMessage) (bool, *apiError) {
	var b bool
	if jsonKind(raw) != "a boolean" || json.Unmarshal(raw, &b) != nil {
		return false, typeError(name, "a boolean", raw)
	}
	return b, nil
}

func asNumber(name string, raw json.RawMessage) (float64, *apiError) {
	var f float64
	if jsonKind(raw) != "a number" || json.Unmarshal(raw, &f) != nil {
		return 0, typeError(name, "a number", raw)
	}
	return f, nil
}

func asInt(name string, raw json.RawMessage) (int64, *apiError) {
	var n json.Number
	if jsonKind(raw) != "a number" || json.Unmarshal(raw, &n) != nil {
		return 0, typeError(name, "an integer", raw)
	}
	i, err := n.Int64()
	if err != nil {
		return 0, badRequest(name, codeInvalidType, "'%s' must be an integer, not %s", name, n)
	}
	return i, nil
}

func parseModel(p *genParams, name string, raw json.RawMessage) *apiError {
	s, err := asString(name, raw)
	p.model = s
	return err
}

func parseMaxTokens(p *genParams, name string, raw json.RawMessage) *apiError {
	n, err := asInt(name, raw)
	if err != nil {
		return err
	}
	if n < 1 {
		return badRequest(name, codeInvalidValue, "'%s' must be at least 1, not %d", name, n)
	}
	p.maxTokens = int(min(n, math.MaxInt32))
	if p.maxTokensArg == "" || name == "max_completion_tokens" {
		p.maxTokensArg = name
	}
	return nil
}

func parseTemperature(p *genParams, name string, raw json.RawMessage) *apiError {
	f, err := asNumber(name, raw)
	if err != nil {
		return err
	}
	if f < 0 || f > 2 {
		return badRequest(name, codeInvalidValue, "'%s' must be between 0 and 2, not %g", name, f)
	}
	p.temperature, p.tempSet = f, true
	return nil
}

func parseTopP(p *genParams, name string, raw json.RawMessage) *apiError {
	f, err := asNumber(name, raw)
	if err != nil {
		return err
	}
	if !(f > 0 && f <= 1) {
		return badRequest(name, codeInvalidValue, "'%s' must be greater than 0 and at most 1, not %g", name, f)
	}
	p.topP = f
	return nil
}

func parseTopK(p *genParams, name string, raw json.RawMessage) *apiError {
	n, err := asInt(name, raw)
	if err != nil {
		return err
	}
	if n < 0 || n > math.MaxInt32 {
		return badRequest(name, codeInvalidValue, "'%s' must be 0 (off) or a positive integer, not %d", name, n)
	}
	p.topK = int(n)
	return nil
}

func parseSeed(p *genParams, name string, raw json.RawMessage) *apiError {
	n, err := asInt(name, raw)
	p.seed, p.seedSet = n, err == nil
	return err
}

func parseStop(p *genParams, name string, raw json.RawMessage) *apiError {
	var stops []string
	switch jsonKind(raw) {
	case "a string":
		s, _ := asString(name, raw)
		stops = []string{s}
	case "an array":
		var items []json.RawMessage
		json.Unmarshal(raw, &items)
		if len(items) > maxStops {
			return badRequest(name, codeInvalidValue, "'%s' may hold at most %d sequences, not %d", name, maxStops, len(items))
		}
		for i, it := range items {
			s, err := asString(fmt.Sprintf("%s[%d]", name, i), it)
			if err != nil {
				return err
			}
			stops = append(stops, s)
		}
	default:
		return typeError(name, "a string or an array of strings", raw)
	}
	for i, s := range stops {
		if s == "" {
			return badRequest(name, codeInvalidValue, "'%s' sequence %d is empty", name, i)
		}
	}
	p.stop = stops
	return nil
}

func parseStreamOptions(p *genParams, name string, raw json.RawMessage) *apiError {
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &obj) != nil {
		return typeError(name, "an object", raw)
	}
	p.streamOpts = true
	for k, v := range obj {
		switch k {
		case "include_usage":
			if isNull(v) {
				continue
			}
			b, err := asBool(name+".include_usage", v)
			if err != nil {
				return err
			}
			p.includeUsage = b
		case "include_obfuscation":
			// Padding against side channels; this server sends none.
			if _, err := asBool(name+"."+k, v); err != nil && !isNull(v) {
				return err
			}
		default:
			return badRequest(name+"."+k, codeUnknownParameter, "unrecognized request argument supplied: %s.%s", name, k)
		}
	}
	return nil
}

func parsePrompt(p *genParams, name string, raw json.RawMessage) *apiError {
	switch jsonKind(raw) {
	case "a string":
		s, _ := asString(name, raw)
		p.text = s
		return nil
	case "an array":
		var items []json.RawMessage
		json.Unmarshal(raw, &items)
		if len(items) == 1 && jsonKind(items[0]) == "a string" {
			s, _ := asString(name, items[0])
			p.text = s
			return nil
		}
		if len(items) == 1 && jsonKind(items[0]) == "an array" {
			// [[tokens]]: one prompt of tokens.
			return parseTokens(p, name+"[0]", items[0])
		}
		if len(items) > 0 && jsonKind(items[0]) == "a number" {
			return parseTokens(p, name, raw)
		}
		if len(items) != 1 {
			return badRequest(name, codeInvalidValue, "'%s' as an array must hold one string, one array of tokens or tokens (one prompt per request), not %d items", name, len(items))
		}
	}
	return typeError(name, "a string, an array of one string, or an array of tokens", raw)
}

// parseTokens takes a prompt given as token ids.
func parseTokens(p *genParams, name string, raw json.RawMessage) *apiError {
	ids, err := tokenList(name, raw)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return badRequest(name, codeInvalidValue, "'%s' holds no tokens", name)
	}
	p.promptIDs = ids
	return nil
}

// tokenList is an array of token ids (their range against the vocabulary
// is checked in prepare).
func tokenList(name string, raw json.RawMessage) ([]int, *apiError) {
	var items []json.RawMessage
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &items) != nil {
		return nil, typeError(name, "an array of token ids", raw)
	}
	ids := make([]int, len(items))
	for i, it := range items {
		n, err := asInt(fmt.Sprintf("%s[%d]", name, i), it)
		if err != nil {
			return nil, err
		}
		if n < 0 || n > math.MaxInt32 {
			return nil, badRequest(name, codeInvalidValue, "'%s[%d]' is %d, not a token", name, i, n)
		}
		ids[i] = int(n)
	}
	return ids, nil
}

// intIn is an integer parameter within [lo, hi].
func intIn(name string, raw json.RawMessage, lo, hi int64) (int, *apiError) {
	n, err := asInt(name, raw)
	if err != nil {
		return 0, err
	}
	if n < lo || n > hi {
		return 0, badRequest(name, codeInvalidValue, "'%s' must be between %d and %d, not %d", name, lo, hi, n)
	}
	return int(n), nil
}

// parseStopTokenIDs takes stop_token_ids (vLLM's): token ids that end a
// choice, like the model's own stop token. Their range is checked against
// the vocabulary in prepare.
func parseStopTokenIDs(p *genParams, name string, raw json.RawMessage) *apiError {
	ids, err := tokenList(name, raw)
	p.stopTokens = ids
	return err
}

// Roles the chat template takes; "developer" is OpenAI's newer "system".
var chatRoles = []string{"system", "developer", "user", "assistant"}

// parseMessages applies the chat template: the messages' contents, in the
// order given, joined by "\n". The default model is a story generator with
// no chat format of its own, so the template only joins the text.
func parseMessages(p *genParams, name string, raw json.RawMessage) *apiError {
	var msgs []json.RawMessage
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &msgs) != nil {
		return typeError(name, "an array of messages", raw)
	}
	if len(msgs) == 0 {
		return badRequest(name, codeInvalidValue, "'%s' must hold at least one message", name)
	}
	texts := make([]string, len(msgs))
	for i, m := range msgs {
		at := fmt.Sprintf("%s[%d]", name, i)
		var obj map[string]json.RawMessage
		if jsonKind(m) != "an object" || json.Unmarshal(m, &obj) != nil {
			return typeError(at, "an object", m)
		}
		roleRaw, ok := obj["role"]
		if !ok {
			return badRequest(at+".role", codeMissing, "'%s.role' is missing", at)
		}
		role, err := asString(at+".role", roleRaw)
		if err != nil {
			return err
		}
		if !slices.Contains(chatRoles, role) {
			return badRequest(at+".role", codeInvalidValue, "'%s.role' is %q; this server takes %s (it has no tools)",
				at, role, strings.Join(chatRoles, ", "))
		}
		keys := slices.Sorted(maps.Keys(obj))
		for _, k := range keys {
			v := obj[k]
			switch k {
			case "role", "content":
			case "name":
				if !isNull(v) {
					if _, err := asString(at+".name", v); err != nil {
						return err
					}
				}
			case "refusal", "annotations":
				// What an assistant message carries back from a response:
				// not part of the text the template joins.
			case "tool_calls", "function_call", "audio":
				if !isNull(v) && !bytes.Equal(bytes.TrimSpace(v), []byte("[]")) {
					return badRequest(at+"."+k, codeUnsupported, "'%s.%s' is not supported: this server has no tools or audio", at, k)
				}
			default:
				return badRequest(at+"."+k, codeUnknownParameter, "unrecognized message field supplied: %s.%s", at, k)
			}
		}
		c, ok := obj["content"]
		if !ok || isNull(c) {
			return badRequest(at+".content", codeMissing, "'%s.content' is missing", at)
		}
		text, aerr := messageText(at+".content", c)
		if aerr != nil {
			return aerr
		}
		texts[i] = text
	}
	p.text = strings.Join(texts, "\n")
	p.messages = raw
	return nil
}

// messageText is a message's content: a string, or an array of text parts
// whose texts are concatenated.
func messageText(name string, raw json.RawMessage) (string, *apiError) {
	switch jsonKind(raw) {
	case "a string":
		return asString(name, raw)
	case "an array":
		var parts []json.RawMessage
		json.Unmarshal(raw, &parts)
		var b strings.Builder
		for j, part := range parts {
			at := fmt.Sprintf("%s[%d]", name, j)
			var obj map[string]json.RawMessage
			if jsonKind(part) != "an object" || json.Unmarshal(part, &obj) != nil {
				return "", typeError(at, "an object", part)
			}
			typ, err := asString(at+".type", obj["type"])
			if err != nil {
				return "", err
			}
			if typ != "text" {
				return "", badRequest(at+".type", codeUnsupported, "content parts of type %q are not supported; only \"text\"", typ)
			}
			for k := range obj {
				if k != "type" && k != "text" {
					return "", badRequest(at+"."+k, codeUnknownParameter, "unrecognized content part field supplied: %s.%s", at, k)
				}
			}
			t, err := asString(at+".text", obj["text"])
			if err != nil {
				return "", err
			}
			b.WriteString(t)
		}
		return b.String(), nil
	}
	return "", typeError(name, "a string or an array of text parts", raw)
}

func mustEqualInt(want int64, why string) fieldFunc {
	return func(_ *genParams, name string, raw json.RawMessage) *apiError {
		n, err := asInt(name, raw)
		if err != nil {
			return err
		}
		if n != want {
			return badRequest(name, codeUnsupported, "'%s' must be %d: %s", name, want, why)
		}
		return nil
	}
}

func mustBeFalse(why string) fieldFunc {
	return func(_ *genParams, name string, raw json.RawMessage) *apiError {
		b, err := asBool(name, raw)
		if err != nil {
			return err
		}
		if b {
			return badRequest(name, codeUnsupported, "'%s' is not supported: %s", name, why)
		}
		return nil
	}
}

func mustBeEmptyString(_ *genParams, name string, raw json.RawMessage) *apiError {
	s, err := asString(name, raw)
	if err != nil {
		return err
	}
	if s != "" {
		return badRequest(name, codeUnsupported, "'%s' is not supported", name)
	}
	return nil
}

func mustBeEmptyArray(why string) fieldFunc {
	return func(_ *genParams, name string, raw json.RawMessage) *apiError {
		var items []json.RawMessage
		if jsonKind(raw) != "an array" || json.Unmarshal(raw, &items) != nil {
			return typeError(name, "an array", raw)
		}
		if len(items) > 0 {
			return badRequest(name, codeUnsupported, "'%s' is not supported: %s", name, why)
		}
		return nil
	}
}

func unsupported(why string) fieldFunc {
	return func(_ *genParams, name string, _ json.RawMessage) *apiError {
		return badRequest(name, codeUnsupported, "'%s' is not supported: %s", name, why)
	}
}

// noneOrAuto takes the tool choices that mean "no tool call" when there
// are no tools.
func noneOrAuto(_ *genParams, name string, raw json.RawMessage) *apiError {
	if jsonKind(raw) == "a string" {
		s, _ := asString(name, raw)
		if s == "none" || s == "auto" {
			return nil
		}
	}
	return badRequest(name, codeUnsupported, "'%s' is not supported: this server has no tools (only \"none\" or \"auto\")", name)
}

func textFormat(_ *genParams, name string, raw json.RawMessage) *apiError {
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &obj) != nil {
		return typeError(name, "an object", raw)
	}
	typ, err := asString(name+".type", obj["type"])
	if err != nil {
		return err
	}
	if typ != "text" || len(obj) != 1 {
		return badRequest(name, codeUnsupported, "'%s' of type %q is not supported; only {\"type\": \"text\"}", name, typ)
	}
	return nil
}

func textModality(_ *genParams, name string, raw json.RawMessage) *apiError {
	var items []string
	if jsonKind(raw) != "an array" || json.Unmarshal(raw, &items) != nil {
		return typeError(name, "an array of strings", raw)
	}
	for _, m := range items {
		if m != "text" {
			return badRequest(name, codeUnsupported, "'%s' %q is not supported; only \"text\"", name, m)
		}
	}
	return nil
}

func ignoreString(_ *genParams, name string, raw json.RawMessage) *apiError {
	_, err := asString(name, raw)
	return err
}

func ignoreBool(_ *genParams, name string, raw json.RawMessage) *apiError {
	_, err := asBool(name, raw)
	return err
}

func ignoreObject(_ *genParams, name string, raw json.RawMessage) *apiError {
	if jsonKind(raw) != "an object" {
		return typeError(name, "an object", raw)
	}
	return nil
}

// maxLogprobs is the most alternatives a token's log probabilities carry
// (vLLM's default limit, engine.MaxTopLogProbs).
const maxLogprobs = 20

func parseCompletionLogprobs(p *genParams, name string, raw json.RawMessage) *apiError {
	n, err := intIn(name, raw, 0, maxLogprobs)
	p.logprobs, p.topLogprobs = err == nil, n
	return err
}
