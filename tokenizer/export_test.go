package tokenizer

// EncodeLlamaCpp is llama.cpp's tokenize(text, add_special,
// parse_special) for a GGUF vocabulary, as its test vectors were made.
func EncodeLlamaCpp(m *Model, text string, addSpecial, parseSpecial bool) []int {
	return m.gguf.encodeOpt(m, text, addSpecial, parseSpecial)
}

// KnownPatterns lists the split patterns with a hand-written matcher.
func KnownPatterns() []string {
	var out []string
	for p := range knownPatterns {
		out = append(out, p)
	}
	return out
}

// SplitBoth returns the pieces of the hand-written matcher of pat and of
// Go's regexp on the translated pattern.
func SplitBoth(pat string) (hand, re func(string) []string, err error) {
	w := knownPatterns[pat]
	r, err := compileRegexp(pat)
	if err != nil {
		return nil, nil, err
	}
	pieces := func(m matcher) func(string) []string {
		return func(s string) []string {
			var out []string
			eachPiece(m, s, func(piece string) { out = append(out, piece) })
			return out
		}
	}
	return pieces(w), pieces(r), nil
}
