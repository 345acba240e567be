package tokenizer

import "unicode/utf8"

// GPT-2's byte-level alphabet: each byte stands for a printable character,
// the printable Latin-1 bytes for themselves and the rest for U+0100 on.
var byteChar, charByte = func() (bc [256]rune, cb map[rune]byte) {
	cb = make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			bc[b] = rune(b)
		} else {
			bc[b] = 0x100 + n
			n++
		}
		cb[bc[b]] = byte(b)
	}
	return bc, cb
}()

// appendByteLevel appends the byte-level characters of s.
func appendByteLevel(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		dst = utf8.AppendRune(dst, byteChar[s[i]])
	}
	return dst
}

// appendFromByteLevel appends the bytes byte-level text s stands for; a
// character outside the alphabet stands for its own UTF-8 bytes.
func appendFromByteLevel(dst []byte, s string) []byte {
	for _, r := range s {
		if b, ok := charByte[r]; ok {
			dst = append(dst, b)
		} else {
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}
