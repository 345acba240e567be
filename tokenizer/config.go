package tokenizer

import (
	"encoding/json"
	"fmt"
)

// hfConfig is what this package reads from tokenizer_config.json.
type hfConfig struct {
	addBOS, addEOS *bool
	bos, eos       *string
	splitSpecial   bool
	templates      map[string]string
}

// tokenString reads a token given as a string or as an AddedToken object.
func tokenString(raw json.RawMessage) (*string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return &s, nil
	}
	var o struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.Content == nil {
		return nil, fmt.Errorf("neither a string nor an object with a content")
	}
	return o.Content, nil
}

func parseConfig(data []byte, file string) (hfConfig, error) {
	var c hfConfig
	if data == nil {
		return c, nil
	}
	var v struct {
		AddBOS       *bool           `json:"add_bos_token"`
		AddEOS       *bool           `json:"add_eos_token"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
		SplitSpecial bool            `json:"split_special_tokens"`
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return c, formatErr(file, "", "not valid JSON: %v", err)
	}
	c.addBOS, c.addEOS, c.splitSpecial = v.AddBOS, v.AddEOS, v.SplitSpecial
	var err error
	if c.bos, err = tokenString(v.BOS); err != nil {
		return c, formatErr(file, "bos_token", "%v", err)
	}
	if c.eos, err = tokenString(v.EOS); err != nil {
		return c, formatErr(file, "eos_token", "%v", err)
	}
	if c.templates, err = parseTemplates(v.ChatTemplate); err != nil {
		return c, formatErr(file, "chat_template", "%v", err)
	}
	return c, nil
}

// parseTemplates reads chat_template: a string, or a list of {name,
// template}.
func parseTemplates(raw json.RawMessage) (map[string]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("neither a string nor a list of {name, template}")
	}
	out := map[string]string{}
	for i, t := range list {
		if t.Name == nil || t.Template == nil {
			return nil, fmt.Errorf("entry %d lacks a name or a template", i)
		}
		out[*t.Name] = *t.Template
	}
	return out, nil
}

// generation is what this package reads from generation_config.json.
type generation struct {
	bos *int
	eos []int
}

func parseGeneration(data []byte, file string) (generation, error) {
	var g generation
	if data == nil {
		return g, nil
	}
	var v struct {
		BOS *int            `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return g, formatErr(file, "", "not valid JSON: %v", err)
	}
	g.bos = v.BOS
	if !isNull(v.EOS) {
		var one int
		if err := json.Unmarshal(v.EOS, &one); err == nil {
			g.eos = []int{one}
		} else if err := json.Unmarshal(v.EOS, &g.eos); err != nil {
			return g, formatErr(file, "eos_token_id", "neither an id nor a list of ids")
		}
	}
	return g, nil
}

// setSpecial fills m.special from the config files and the post-processor.
func (m *Model) setSpecial(c hfConfig, g generation, file string) {
	s := Special{BOS: -1, EOT: -1}
	id := func(tok *string) int {
		if tok == nil {
			return -1
		}
		for i, t := range m.tokens {
			if t == *tok && (m.addedIDs[i] || m.bpe.idOf(t) == i) {
				return i
			}
		}
		return -1
	}
	s.BOS = id(c.bos)
	if s.BOS < 0 && g.bos != nil && *g.bos >= 0 && *g.bos < len(m.tokens) {
		s.BOS = *g.bos
	}
	addEOS := func(e int) {
		if e >= 0 && e < len(m.tokens) && !s.IsEOS(e) {
			s.EOS = append(s.EOS, e)
		}
	}
	addEOS(id(c.eos))
	for _, e := range g.eos {
		addEOS(e)
	}
	// The post-processor says what addSpecial adds; add_bos_token and
	// add_eos_token in the config override it, as transformers does.
	s.AddBOS = s.BOS >= 0 && len(m.prefix) > 0 && m.prefix[0] == s.BOS
	if c.addBOS != nil && s.BOS >= 0 {
		if *c.addBOS && !s.AddBOS {
			m.prefix = append([]int{s.BOS}, m.prefix...)
		} else if !*c.addBOS && s.AddBOS {
			m.prefix = m.prefix[1:]
		}
		s.AddBOS = *c.addBOS
	}
	if len(s.EOS) > 0 {
		e := s.EOS[0]
		s.AddEOS = len(m.suffix) > 0 && m.suffix[len(m.suffix)-1] == e
		if c.addEOS != nil {
			if *c.addEOS && !s.AddEOS {
				m.suffix = append(m.suffix, e)
			} else if !*c.addEOS && s.AddEOS {
				m.suffix = m.suffix[:len(m.suffix)-1]
			}
			s.AddEOS = *c.addEOS
		}
	}
	for _, name := range []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|eot|>"} {
		if e := id(&name); e >= 0 {
			s.EOT = e
			addEOS(e)
			break
		}
	}
	_ = file
	m.special = s
}
