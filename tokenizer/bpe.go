package tokenizer

import (
	"sync"
	"unicode/utf8"

	"github.com/reprise-ml/reprise/internal/pairheap"
)

// pairKey packs two token ids into a map key.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// merge is what a BPE merge rule gives: its rank (lower merges first) and
// the id of the merged token.
type merge struct{ rank, id int32 }

// bpe is a BPE model: merge rules over token ids, applied lowest rank
// first, leftmost first among equal ranks (as Hugging Face tokenizers and
// llama.cpp apply them).
type bpe struct {
	ids    map[string]int32 // token text -> id
	merges map[uint64]merge
	// byteLevel: the text is bytes, each standing for the token of its
	// byte-level character (byteIDs; -1 when the vocabulary lacks it).
	byteLevel bool
	byteIDs   [256]int32
	// byteFallback: a character without a token becomes its bytes' <0xXX>
	// tokens (fallback; -1 when missing).
	byteFallback bool
	fallback     [256]int32
	unk          int32 // -1: none
	fuseUnk      bool
	ignoreMerges bool

	cacheMu sync.Mutex
	cache   map[string][]int32
}

const (
	bpeCacheEntries = 1 << 15 // words cached before the cache starts over
	bpeCacheWordLen = 64      // longer words are not cached
)

// symbol is one token of a word being merged, in a doubly linked list.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	alive      bool
}

// candidate is a pair that may merge: symbols pos and its next, at the
// given rank, into id. The heap orders candidates by rank, lowest first,
// then leftmost first.
type candidate struct{ rank, pos, id int32 }

// bpeScratch is reused across the words of one Encode.
type bpeScratch struct {
	syms []symbol
	heap pairheap.Heap[candidate]
	text []byte
}

// initial appends the symbols a word starts from.
func (m *bpe) initial(word string, sc *bpeScratch) {
	sc.syms = sc.syms[:0]
	add := func(id int32) {
		if id < 0 {
			return // a character with no token and no unk: dropped, as HF does
		}
		if m.fuseUnk && id == m.unk && len(sc.syms) > 0 && sc.syms[len(sc.syms)-1].id == m.unk {
			return
		}
		sc.syms = append(sc.syms, symbol{id: id})
	}
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			id := m.byteIDs[word[i]]
			if id < 0 {
				id = m.unk
			}
			add(id)
		}
		return
	}
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		if id, ok := m.ids[word[i:i+n]]; ok {
			add(id)
		} else if m.byteFallback && m.hasFallback(word[i:i+n]) {
			for j := i; j < i+n; j++ {
				add(m.fallback[word[j]])
			}
		} else {
			add(m.unk)
		}
		i += n
	}
}

func (m *bpe) hasFallback(s string) bool {
	for i := 0; i < len(s); i++ {
		if m.fallback[s[i]] < 0 {
			return false
		}
	}
	return true
}

// encodeWord appends the ids of one pre-tokenized word.
func (m *bpe) encodeWord(dst []int, word string, sc *bpeScratch) []int {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		key := word
		if m.byteLevel {
			sc.text = appendByteLevel(sc.text[:0], word)
			key = string(sc.text)
		}
		if id, ok := m.ids[key]; ok {
			return append(dst, int(id))
		}
	}
	cacheable := len(word) <= bpeCacheWordLen
	if cacheable {
		m.cacheMu.Lock()
		ids, ok := m.cache[word]
		m.cacheMu.Unlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	m.initial(word, sc)
	syms := sc.syms
	if len(syms) > 1 {
		for i := range syms {
			syms[i].prev, syms[i].next, syms[i].alive = int32(i-1), int32(i+1), true
		}
		syms[len(syms)-1].next = -1
		h := sc.heap[:0]
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
				h.Push(pairheap.RankKey(mg.rank, int32(i)), candidate{mg.rank, int32(i), mg.id})
			}
		}
		for h.Len() > 0 {
			c := h.Pop()
			l := &syms[c.pos]
			if !l.alive || l.next < 0 {
				continue
			}
			r := &syms[l.next]
			// Stale when either side has merged since the pair was pushed.
			if mg, ok := m.merges[pairKey(l.id, r.id)]; !ok || mg.id != c.id || mg.rank != c.rank {
				continue
			}
			l.id = c.id
			r.alive = false
			l.next = r.next
			if r.next >= 0 {
				syms[r.next].prev = c.pos
			}
			if l.prev >= 0 {
				if mg, ok := m.merges[pairKey(syms[l.prev].id, l.id)]; ok {
					h.Push(pairheap.RankKey(mg.rank, l.prev), candidate{mg.rank, l.prev, mg.id})
				}
			}
			if l.next >= 0 {
				if mg, ok := m.merges[pairKey(l.id, syms[l.next].id)]; ok {
					h.Push(pairheap.RankKey(mg.rank, c.pos), candidate{mg.rank, c.pos, mg.id})
				}
			}
		}
		sc.heap = h
	}
	start := len(dst)
	for i := 0; i >= 0 && i < len(syms); {
		dst = append(dst, int(syms[i].id))
		if len(syms) == 1 {
			break
		}
		i = int(syms[i].next)
	}
	if cacheable {
		ids := make([]int32, len(dst)-start)
		for i, id := range dst[start:] {
			ids[i] = int32(id)
		}
		m.cacheMu.Lock()
		if len(m.cache) >= bpeCacheEntries {
			clear(m.cache)
		}
		m.cache[word] = ids
		m.cacheMu.Unlock()
	}
	return dst
}
