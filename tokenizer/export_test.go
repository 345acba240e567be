package tokenizer

// EncodeLlamaCpp is llama.cpp's tokenize(text, add_special,
// parse_special) for a GGUF vocabulary, as its test vectors were made.
func EncodeLlamaCpp(m *Model, text string, addSpecial, parseSpecial bool) []int {
	return m.gguf.encodeOpt(m, text, addSpecial, parseSpecial)
}
