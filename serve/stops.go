package serve

import (
	"bytes"
	"strings"
	"unicode/utf8"
)

// stopper assembles a request's text piece by piece and finds its stop
// sequences. Text that could still turn out to be the start of a stop
// sequence is held back, so what has been released never has to be taken
// back: a stream sends exactly the text a non-streaming answer returns.
type stopper struct {
	stops  []string
	maxLen int
	text   []byte
	sent   int  // text[:sent] has been released
	cut    int  // where the text ends once a stop matched
	done   bool // a stop sequence matched
}

func newStopper(stops []string) *stopper {
	s := &stopper{stops: stops}
	for _, x := range stops {
		s.maxLen = max(s.maxLen, len(x))
	}
	return s
}

// add appends a piece and returns the text now safe to release, and whether
// a stop sequence matched (the text then ends just before it).
func (s *stopper) add(piece []byte) (string, bool) {
	if s.done {
		return "", true
	}
	s.text = append(s.text, piece...)
	if len(s.stops) == 0 {
		// A token may end inside a UTF-8 sequence: hold its start until a
		// later token completes it.
		end := len(s.text) - incompleteUTF8(s.text)
		out := string(s.text[s.sent:end])
		s.sent = max(s.sent, end)
		return out, false
	}
	// Everything before sent is known to start no stop sequence, so every
	// match is at or after it. The stop that matches is the first to
	// complete (the smallest end; of those ending together, the earliest
	// start), as a generation that stops at its first match would see it:
	// a longer stop that began earlier but ends later never completes. That
	// choice does not depend on how the text was split into pieces (the
	// earliest start would: in "abcd" with stops "bcd" and "c", "c" ends
	// first whenever "d" arrives in a later piece).
	rest := s.text[s.sent:]
	at, end := -1, 0
	for _, x := range s.stops {
		if i := bytes.Index(rest, []byte(x)); i >= 0 && (at < 0 || i+len(x) < end || i+len(x) == end && i < at) {
			at, end = i, i+len(x)
		}
	}
	if at >= 0 {
		out := string(rest[:at])
		s.cut = s.sent + at
		s.sent = s.cut
		s.done = true
		return out, true
	}
	hold := 0
	for k := min(s.maxLen-1, len(rest)); k > 0; k-- {
		suffix := string(rest[len(rest)-k:])
		if s.isPrefix(suffix) {
			hold = k
			break
		}
	}
	hold = max(hold, incompleteUTF8(rest))
	out := string(rest[:len(rest)-hold])
	s.sent += len(out)
	return out, false
}

// incompleteUTF8 is the length of an incomplete (but so far valid) UTF-8
// sequence at the end of b.
func incompleteUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-3; i-- {
		c := b[i]
		if c < 0x80 {
			return 0
		}
		if c >= 0xC0 {
			if !utf8.FullRune(b[i:]) {
				return len(b) - i
			}
			return 0
		}
	}
	return 0
}

func (s *stopper) isPrefix(t string) bool {
	for _, x := range s.stops {
		if strings.HasPrefix(x, t) {
			return true
		}
	}
	return false
}

// flush releases what was held back: the generation ended without a match.
func (s *stopper) flush() string {
	if s.done {
		return ""
	}
	out := string(s.text[s.sent:])
	s.sent = len(s.text)
	return out
}

// result is the whole text, cut before a matched stop sequence.
func (s *stopper) result() string {
	if s.done {
		return string(s.text[:s.cut])
	}
	return string(s.text)
}
