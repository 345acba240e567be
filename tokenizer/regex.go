package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// matcher finds the non-overlapping matches of a split pattern in order.
type matcher interface {
	each(s string, fn func(start, end int))
}

// eachPiece calls fn for every piece m cuts s into, in order: each match,
// and each non-empty stretch between matches (an Isolated split).
func eachPiece(m matcher, s string, fn func(piece string)) {
	last := 0
	m.each(s, func(start, end int) {
		if start > last {
			fn(s[last:start])
		}
		fn(s[start:end])
		last = end
	})
	if last < len(s) {
		fn(s[last:])
	}
}

// Split patterns with a hand-written matcher (see wordSplitter), as they
// appear in tokenizer.json files and in llama.cpp.
var knownPatterns = map[string]*wordSplitter{
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`:                                                                       {name: "gpt2"},
	`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`:                                                                           {name: "gpt2"},
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                              {name: "llama3", llama3: true, foldCase: true, maxDigits: 3},
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: {name: "llama3", llama3: true, foldCase: true, maxDigits: 3},
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:                                   {name: "qwen2", llama3: true, foldCase: true, maxDigits: 1},
	`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:      {name: "qwen2", llama3: true, foldCase: true, maxDigits: 1},
}

// compilePattern returns the matcher of an Oniguruma-style split pattern: a
// hand-written one for the known patterns, else Go's regexp on the pattern
// translated (\s, \d, \w as Unicode classes; a trailing \s+(?!\S)
// alternative emulated by backing off one character).
func compilePattern(pat string) (matcher, error) {
	if w, ok := knownPatterns[pat]; ok {
		return w, nil
	}
	return compileRegexp(pat)
}

// regexpMatcher runs a translated pattern with Go's regexp.
type regexpMatcher struct {
	re *regexp.Regexp
	// backoff: the pattern's last alternatives were \s+(?!\S) (group 1 here)
	// and, when orSpace, \s+ after it.
	backoff, orSpace bool
}

const (
	goSpaceClass = `\t\n\v\f\r \x{85}\p{Z}`
	goWordClass  = `\p{L}\p{M}\p{Nd}\p{Pc}`
)

// perlClasses are what \s, \d and \w match in the patterns (Unicode, as in
// Python and Oniguruma; Go's are ASCII), as the inside of a class; \S, \D
// and \W are their negations.
var perlClasses = map[byte]string{'s': goSpaceClass, 'd': `\p{Nd}`, 'w': goWordClass}

// compileRegexp translates pat to Go's syntax and compiles it.
func compileRegexp(pat string) (*regexpMatcher, error) {
	m := &regexpMatcher{}
	body := pat
	switch {
	case strings.HasSuffix(body, `|\s+(?!\S)|\s+`):
		body, m.backoff, m.orSpace = strings.TrimSuffix(body, `|\s+(?!\S)|\s+`), true, true
	case strings.HasSuffix(body, `|\s+(?!\S)`):
		body, m.backoff = strings.TrimSuffix(body, `|\s+(?!\S)`), true
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body):
			i++
			e := body[i]
			switch e {
			case 's', 'd', 'w':
				if cls := perlClasses[e]; inClass {
					b.WriteString(cls)
				} else {
					b.WriteString("[" + cls + "]")
				}
			case 'S', 'D', 'W':
				if inClass {
					return nil, fmt.Errorf("pattern %q: \\%c inside a character class is not supported", pat, e)
				}
				b.WriteString("[^" + perlClasses[e-'A'+'a'] + "]")
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' or '^]' right after '[' is a literal.
			if i+1 < len(body) && body[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(body) && body[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		case c == '(' && !inClass && i+2 < len(body) && body[i+1] == '?' &&
			(body[i+2] == '=' || body[i+2] == '!' || body[i+2] == '<' || body[i+2] == '>'):
			return nil, fmt.Errorf("pattern %q: look-around and atomic groups are not supported (only a final \\s+(?!\\S) alternative)", pat)
		case (c == '+' || c == '*' || c == '?') && !inClass && i+1 < len(body) && body[i+1] == '+':
			return nil, fmt.Errorf("pattern %q: possessive quantifiers are not supported", pat)
		default:
			b.WriteByte(c)
		}
	}
	src := b.String()
	if m.backoff {
		if src != "" {
			src += "|"
		}
		src += "([" + goSpaceClass + "]+)"
	}
	re, err := regexp.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("pattern %q: %w", pat, err)
	}
	m.re = re
	return m, nil
}

func (m *regexpMatcher) each(s string, fn func(start, end int)) {
	if !m.backoff {
		for _, loc := range m.re.FindAllStringIndex(s, -1) {
			if loc[1] > loc[0] {
				fn(loc[0], loc[1])
			}
		}
		return
	}
	group := m.re.NumSubexp() // the \s+ group is the last one
	for pos := 0; pos < len(s); {
		loc := m.re.FindStringSubmatchIndex(s[pos:])
		if loc == nil {
			return
		}
		start, end := pos+loc[0], pos+loc[1]
		if loc[2*group] >= 0 && end < len(s) {
			// \s+(?!\S) before a non-space: give its last character back.
			_, n := utf8.DecodeLastRuneInString(s[start:end])
			if end-n > start {
				end -= n
			} else if !m.orSpace {
				// One whitespace character before a non-space: no match here.
				pos = end
				continue
			}
		}
		if end == start {
			// An empty match: step over one character.
			_, n := utf8.DecodeRuneInString(s[start:])
			pos = start + max(n, 1)
			continue
		}
		fn(start, end)
		pos = end
	}
}
