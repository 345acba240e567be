package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Character classes of the pre-tokenizer patterns: \p{L}, \p{N}, \s (Unicode
// White_Space, as Oniguruma and llama.cpp read it) and everything else.
const (
	clsOther = iota
	clsLetter
	clsNumber
	clsSpace
	clsNewline // \r or \n (also clsSpace)
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch {
		case c == '\r' || c == '\n':
			t[c] = clsNewline
		case c == ' ' || c == '\t' || c == '\v' || c == '\f':
			t[c] = clsSpace
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
			t[c] = clsLetter
		case '0' <= c && c <= '9':
			t[c] = clsNumber
		default:
			t[c] = clsOther
		}
	}
	return t
}()

// isWhiteSpace is the Unicode White_Space property.
func isWhiteSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return 0x2000 <= r && r <= 0x200A
}

// classAt returns the class of the character at s[i] and its width. An
// invalid byte is one character of class other.
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n == 1:
		return clsOther, 1
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case isWhiteSpace(r):
		return clsSpace, n
	}
	return clsOther, n
}

func isSpaceCls(c uint8) bool { return c == clsSpace || c == clsNewline }

// wordSplitter is a hand-written matcher for the two families of split
// patterns byte-level BPE tokenizers use, equal to the regular expression
// it stands for (tested against the regexp engine on the fixtures and by
// fuzzing) and linear in the text:
//
//	gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//	llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
//	        ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// (llama3 with D = 3; Qwen2 with D = 1). Every position matches, so with the
// Isolated behaviour the matches are the pieces.
type wordSplitter struct {
	llama3    bool
	foldCase  bool // contractions match either case
	maxDigits int  // llama3's \p{N}{1,D}; gpt2 takes \p{N}+
	name      string
}

// contraction returns the length of a contraction at s[i] (s[i] == '\”), or 0.
func (w *wordSplitter) contraction(s string, i int) int {
	lower := func(c byte) byte {
		if w.foldCase && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	if i+1 >= len(s) {
		return 0
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return 3
		}
	case 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return 3
		}
	}
	return 0
}

// run returns the end of the run of characters of class c from i.
func run(s string, i int, want func(uint8) bool) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if !want(c) {
			break
		}
		i += n
	}
	return i
}

func isLetterCls(c uint8) bool { return c == clsLetter }
func isNumberCls(c uint8) bool { return c == clsNumber }
func isOtherCls(c uint8) bool  { return c == clsOther }
func isNLCls(c uint8) bool     { return c == clsNewline }

// spaceEnd matches \s+(?!\S)|\s+ at s[i], a whitespace character.
func spaceEnd(s string, i int) int {
	j := i
	last := i // start of the run's last character
	for j < len(s) {
		c, n := classAt(s, j)
		if !isSpaceCls(c) {
			break
		}
		last = j
		j += n
	}
	if j < len(s) && last > i {
		return last // back off one character: the next is whitespace
	}
	return j
}

// match returns the end of the match that starts at s[i].
func (w *wordSplitter) match(s string, i int) int {
	c, n := classAt(s, i)
	if s[i] == '\'' {
		if k := w.contraction(s, i); k > 0 {
			return i + k
		}
	}
	if !w.llama3 {
		start := i
		if s[i] == ' ' && i+1 < len(s) {
			c, n = classAt(s, i+1)
			i++
		}
		switch c {
		case clsLetter:
			return run(s, i+n, isLetterCls)
		case clsNumber:
			return run(s, i+n, isNumberCls)
		case clsOther:
			return run(s, i+n, isOtherCls)
		}
		return spaceEnd(s, start)
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(s, i+n, isLetterCls)
	}
	if (c == clsOther || c == clsSpace) && i+n < len(s) {
		if c2, n2 := classAt(s, i+n); c2 == clsLetter {
			return run(s, i+n+n2, isLetterCls)
		}
	}
	// \p{N}{1,D}
	if c == clsNumber {
		j := i + n
		for k := 1; k < w.maxDigits && j < len(s); k++ {
			c2, n2 := classAt(s, j)
			if c2 != clsNumber {
				break
			}
			j += n2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if s[i] == ' ' && i+1 < len(s) {
		if c2, _ := classAt(s, i+1); c2 == clsOther {
			j = i + 1
		}
	}
	if c2, n2 := classAt(s, j); c2 == clsOther {
		j = run(s, j+n2, isOtherCls)
		return run(s, j, isNLCls)
	}
	// \s*[\r\n]+: up to and including the run's last newline.
	j = i
	lastNL := -1
	for j < len(s) {
		c2, n2 := classAt(s, j)
		if !isSpaceCls(c2) {
			break
		}
		if c2 == clsNewline {
			lastNL = j + n2
		}
		j += n2
	}
	if lastNL > 0 {
		return lastNL
	}
	return spaceEnd(s, i)
}

// each calls fn with the bounds of every match in s.
func (w *wordSplitter) each(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		j := w.match(s, i)
		fn(i, j)
		i = j
	}
}
