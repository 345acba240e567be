package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer splits a (normalized) text into the words the model encodes
// one by one. first is set for the text that starts the input (not one
// that follows an added token).
type preTokenizer interface {
	split(dst []string, s string, first bool) []string
}

// splitBehavior is how a Split pre-tokenizer treats its matches.
type splitBehavior int

const (
	behaviorIsolated splitBehavior = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

type splitPre struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func (p *splitPre) split(dst []string, s string, _ bool) []string {
	if s == "" {
		return dst
	}
	// Spans alternate: gaps (not matched) and matches.
	type span struct {
		start, end int
		match      bool
	}
	var spans []span
	last := 0
	p.m.each(s, func(start, end int) {
		if start > last {
			spans = append(spans, span{last, start, false})
		}
		spans = append(spans, span{start, end, true})
		last = end
	})
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	if p.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	switch p.behavior {
	case behaviorIsolated:
		for _, sp := range spans {
			dst = append(dst, s[sp.start:sp.end])
		}
	case behaviorRemoved:
		for _, sp := range spans {
			if !sp.match {
				dst = append(dst, s[sp.start:sp.end])
			}
		}
	case behaviorMergedWithPrevious:
		start := 0
		for _, sp := range spans {
			if sp.match {
				dst = append(dst, s[start:sp.end])
				start = sp.end
			}
		}
		if start < len(s) {
			dst = append(dst, s[start:])
		}
	case behaviorMergedWithNext:
		start := 0
		for _, sp := range spans {
			if sp.match && sp.start > start {
				dst = append(dst, s[start:sp.start])
				start = sp.start
			}
		}
		if start < len(s) {
			dst = append(dst, s[start:])
		}
	case behaviorContiguous:
		for i := 0; i < len(spans); {
			j := i + 1
			for spans[i].match && j < len(spans) && spans[j].match {
				j++
			}
			dst = append(dst, s[spans[i].start:spans[j-1].end])
			i = j
		}
	}
	return dst
}

// digitsPre isolates digits: each one, or each run.
type digitsPre struct{ individual bool }

func (p digitsPre) split(dst []string, s string, _ bool) []string {
	start := 0
	for i := 0; i < len(s); {
		r, n := decodeRune(s, i)
		if unicode.IsNumber(r) {
			j := i + n
			if !p.individual {
				for j < len(s) {
					r2, n2 := decodeRune(s, j)
					if !unicode.IsNumber(r2) {
						break
					}
					j += n2
				}
			}
			if i > start {
				dst = append(dst, s[start:i])
			}
			dst = append(dst, s[i:j])
			start, i = j, j
			continue
		}
		i += n
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

// metaspacePre replaces spaces by the replacement character (▁), prepends
// one (prepend scheme "always", or "first" for the input's first text),
// and splits before each replacement character when split is set.
type metaspacePre struct {
	replacement string
	prepend     string // "always", "first", "never"
	splitWords  bool
}

func (p metaspacePre) split(dst []string, s string, first bool) []string {
	if s == "" {
		return dst
	}
	s = strings.ReplaceAll(s, " ", p.replacement)
	if (p.prepend == "always" || p.prepend == "first" && first) && !strings.HasPrefix(s, p.replacement) {
		s = p.replacement + s
	}
	if !p.splitWords {
		return append(dst, s)
	}
	start := 0
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], p.replacement) {
			if i > start {
				dst = append(dst, s[start:i])
			}
			start = i
			i += len(p.replacement)
			continue
		}
		i++
	}
	return append(dst, s[start:])
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional prefix space,
// the GPT-2 split when useRegex, and (done by the model) bytes as
// characters.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

var gpt2Splitter = &wordSplitter{name: "gpt2"}

func (p byteLevelPre) split(dst []string, s string, first bool) []string {
	if p.addPrefixSpace && s != "" && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !p.useRegex {
		return append(dst, s)
	}
	gpt2Splitter.each(s, func(start, end int) { dst = append(dst, s[start:end]) })
	return dst
}

// seqPre applies pre-tokenizers in turn, each to every piece of the last.
type seqPre []preTokenizer

func (q seqPre) split(dst []string, s string, first bool) []string {
	pieces := []string{s}
	for _, p := range q {
		var next []string
		for i, w := range pieces {
			next = p.split(next, w, first && i == 0)
		}
		pieces = next
	}
	return append(dst, pieces...)
}

func decodeRune(s string, i int) (rune, int) {
	if c := s[i]; c < 0x80 {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}
