package serve

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/reprise-ml/reprise/engine"
)

// The logit processing vLLM accepts on both endpoints: the penalties,
// logit_bias, min_p and min_tokens. They reach the engine as
// engine.Penalties; the token ids of logit_bias are checked against the
// vocabulary, and min_tokens against max_tokens, in prepare.

func parseRepetition(p *genParams, name string, raw json.RawMessage) *apiError {
	f, err := asNumber(name, raw)
	if err != nil {
		return err
	}
	if !(f > 0) || math.IsInf(f, 0) || f > math.MaxFloat32 {
		return badRequest(name, codeInvalidValue, "'%s' must be greater than 0 (1 is off), not %g", name, f)
	}
	p.pen.Repetition = float32(f)
	return nil
}

func parseMinTokens(p *genParams, name string, raw json.RawMessage) *apiError {
	n, err := asInt(name, raw)
	if err != nil {
		return err
	}
	if n < 0 || n > math.MaxInt32 {
		return badRequest(name, codeInvalidValue, "'%s' must be 0 or a positive integer, not %d", name, n)
	}
	p.pen.MinTokens = int(n)
	return nil
}

// parseLogitBias takes OpenAI's map of token ids (as strings) to biases
// from -100 to 100.
func parseLogitBias(p *genParams, name string, raw json.RawMessage) *apiError {
	var obj map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &obj) != nil {
		return typeError(name, "an object of token ids to biases", raw)
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bias := map[int32]float32{}
	for _, k := range keys {
		at := name + "." + k
		id, perr := strconv.ParseInt(k, 10, 32)
		if perr != nil || id < 0 {
			return badRequest(at, codeInvalidValue, "'%s' has the key %q, not a token id", name, k)
		}
		b, err := penaltyNumber(at, obj[k], -engine.MaxLogitBias, engine.MaxLogitBias)
		if err != nil {
			return err
		}
		if b != 0 {
			bias[int32(id)] = float32(b)
		}
	}
	if len(bias) > 0 {
		p.pen.LogitBias = bias
	}
	return nil
}

func penaltyNumber(name string, raw json.RawMessage, lo, hi float64) (float64, *apiError) {
	f, err := asNumber(name, raw)
	if err != nil {
		return 0, err
	}
	if !(f >= lo && f <= hi) {
		return 0, badRequest(name, codeInvalidValue, "'%s' must be between %g and %g, not %g", name, lo, hi, f)
	}
	return f, nil
}

// checkPenalties checks what depends on the model and the request's
// length: logit_bias's tokens and min_tokens.
func (s *Server) checkPenalties(p *genParams, maxTokens int) *apiError {
	for t := range p.pen.LogitBias {
		if int(t) >= s.info.Vocab {
			return badRequest("logit_bias", codeInvalidValue, "'logit_bias' has token %d, outside the model's vocabulary of %d", t, s.info.Vocab)
		}
	}
	if p.pen.MinTokens > maxTokens {
		return badRequest("min_tokens", codeInvalidValue, "'min_tokens' (%d) is more than the %d tokens to generate", p.pen.MinTokens, maxTokens)
	}
	return nil
}
