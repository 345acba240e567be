package llama2c

// MaxBytesPerToken bounds the bytes of input text one token of Encode
// stands for: the header's max_token_length (at least 1). A token's piece
// is the concatenation of the input bytes it covers (a byte token's
// "<0xHH>" is longer than the byte), and no piece is longer than
// max_token_length, so Encode(text) has at least
// ceil(len(text)/MaxBytesPerToken()) tokens besides BOS and EOS. A server
// refuses a text that long for a shorter context without encoding it.
func (t *Tokenizer) MaxBytesPerToken() int { return max(t.maxLen, 1) }
