package tokenizer

import "unicode"

// addedEntry is a token matched in the text before the model sees it.
type addedEntry struct {
	id                         int
	content                    string
	singleWord, lstrip, rstrip bool
}

// trie finds added tokens leftmost-longest, as Hugging Face tokenizers
// does: at the first position where one starts, the longest that starts
// there.
type trie struct {
	root  [256]int32
	nodes []trieNode
}

type trieNode struct {
	next  map[byte]int32
	entry int32 // index into entries, -1: none
}

type addedMatcher struct {
	t       trie
	entries []addedEntry
}

func newAddedMatcher(entries []addedEntry) *addedMatcher {
	if len(entries) == 0 {
		return nil
	}
	m := &addedMatcher{entries: entries}
	for i := range m.t.root {
		m.t.root[i] = -1
	}
	for ei, e := range entries {
		if e.content == "" {
			continue
		}
		n := &m.t.root[e.content[0]]
		if *n < 0 {
			*n = int32(len(m.t.nodes))
			m.t.nodes = append(m.t.nodes, trieNode{entry: -1})
		}
		cur := *n
		for j := 1; j < len(e.content); j++ {
			node := &m.t.nodes[cur]
			nx, ok := node.next[e.content[j]]
			if !ok {
				nx = int32(len(m.t.nodes))
				if node.next == nil {
					node.next = map[byte]int32{}
				}
				node.next[e.content[j]] = nx
				m.t.nodes = append(m.t.nodes, trieNode{entry: -1})
			}
			cur = nx
		}
		if m.t.nodes[cur].entry < 0 {
			m.t.nodes[cur].entry = int32(ei)
		}
	}
	return m
}

// longestAt returns the entry of the longest token at s[i:] and its end.
func (m *addedMatcher) longestAt(s string, i int) (int, int) {
	cur := m.t.root[s[i]]
	best, bestEnd := -1, 0
	for j := i + 1; cur >= 0; j++ {
		node := &m.t.nodes[cur]
		if node.entry >= 0 {
			best, bestEnd = int(node.entry), j
		}
		if j >= len(s) || node.next == nil {
			break
		}
		nx, ok := node.next[s[j]]
		if !ok {
			break
		}
		cur = nx
	}
	return best, bestEnd
}

// isWordRune is Rust regex's Unicode \w, which Hugging Face's single_word
// test uses: Alphabetic (letters and letter numbers), marks, decimal digits,
// connector punctuation and the joiners.
func isWordRune(r rune) bool {
	return unicode.In(r, unicode.L, unicode.M, unicode.Nd, unicode.Nl, unicode.Pc) || r == '\u200c' || r == '\u200d'
}

// standsAlone reports whether s[start:end] has no word character on
// either side (single_word).
func standsAlone(s string, start, end int) bool {
	if start > 0 {
		if r, _ := lastRune(s[:start]); isWordRune(r) {
			return false
		}
	}
	if end < len(s) {
		if r, _ := decodeRune(s, end); isWordRune(r) {
			return false
		}
	}
	return true
}

// each calls text for every stretch of s between added tokens and token
// for every added token, in order.
func (m *addedMatcher) each(s string, text func(string), token func(id int)) {
	if m == nil {
		text(s)
		return
	}
	last := 0
	for i := 0; i < len(s); i++ {
		if m.t.root[s[i]] < 0 {
			continue
		}
		ei, end := m.longestAt(s, i)
		if ei < 0 {
			continue
		}
		e := &m.entries[ei]
		start := i
		if e.singleWord && !standsAlone(s, start, end) {
			// Rejected, but consumed: the scan goes on after it, as Hugging
			// Face's non-overlapping Aho-Corasick scan does.
			i = end - 1
			continue
		}
		if e.lstrip {
			for start > last {
				r, n := lastRune(s[last:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= n
			}
		}
		if e.rstrip {
			for end < len(s) {
				r, n := decodeRune(s, end)
				if !unicode.IsSpace(r) {
					break
				}
				end += n
			}
		}
		if start > last {
			text(s[last:start])
		}
		token(e.id)
		last = end
		i = end - 1
	}
	if last < len(s) {
		text(s[last:])
	}
}
