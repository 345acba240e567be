package tokenizer

import "github.com/reprise-ml/reprise/internal/pairheap"

// spm is the SentencePiece-style BPE of llama.cpp's "llama" vocabularies:
// the text is split into UTF-8 characters, and the adjacent pair whose
// concatenation is a token with the highest score merges first (the
// leftmost among equal scores), until no pair is a token. A character that
// never became a token is written as its bytes' <0xXX> tokens.
type spm struct {
	ids    map[string]int32
	scores []float32
	bytes  [256]int32 // <0xXX> tokens, else the one-byte token; -1: none
	unk    int32
}

// spmSym is a symbol: the bytes text[start:end], linked to its neighbours.
type spmSym struct {
	start, end int32
	prev, next int32
}

// spmCand is a pair that may merge: the symbols left and right, whose
// concatenation was size bytes long when pushed. The heap orders
// candidates by score, highest first, then leftmost first.
type spmCand struct {
	left, right int32
	size        int32
}

// utf8Len is llama.cpp's unicode_len_utf8: the length a lead byte
// announces (a stray continuation byte is one character).
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

func (m *spm) encode(dst []int, text string) []int {
	if text == "" {
		return dst
	}
	syms := make([]spmSym, 0, len(text))
	for i := 0; i < len(text); {
		n := min(utf8Len(text[i]), len(text)-i)
		syms = append(syms, spmSym{start: int32(i), end: int32(i + n), prev: int32(len(syms) - 1), next: int32(len(syms) + 1)})
		i += n
	}
	syms[len(syms)-1].next = -1
	var h pairheap.Heap[spmCand]
	push := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		s := text[syms[l].start:syms[r].end]
		if id, ok := m.ids[s]; ok {
			h.Push(pairheap.ScoreKey(m.scores[id], l), spmCand{left: l, right: r, size: int32(len(s))})
		}
	}
	for i := 1; i < len(syms); i++ {
		push(int32(i-1), int32(i))
	}
	for h.Len() > 0 {
		c := h.Pop()
		l, r := &syms[c.left], &syms[c.right]
		// Stale when either side has merged since (an empty symbol, or a
		// different total length).
		if l.end == l.start || r.end == r.start || (l.end-l.start)+(r.end-r.start) != c.size || l.next != c.right {
			continue
		}
		l.end = r.end
		r.end = r.start
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = c.left
		}
		push(l.prev, c.left)
		push(c.left, l.next)
	}
	for i := int32(0); i >= 0; i = syms[i].next {
		s := text[syms[i].start:syms[i].end]
		if id, ok := m.ids[s]; ok {
			dst = append(dst, int(id))
			continue
		}
		for j := 0; j < len(s); j++ {
			if id := m.bytes[s[j]]; id >= 0 {
				dst = append(dst, int(id))
			} else if m.unk >= 0 {
				dst = append(dst, int(m.unk))
			}
		}
	}
	return dst
}
