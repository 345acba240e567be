package tokenizer

import (
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
	// shrink bounds how many input bytes one output byte can stand for
	// (0: no bound).
	shrink() int
}

type nfcNorm struct{ form norm.Form }

func (n nfcNorm) normalize(s string) string {
	if n.form.IsNormalString(s) {
		return s
	}
	return n.form.String(s)
}

// Composition can fold a few characters into one (a Hangul syllable from
// three 3-byte jamo): three bytes per byte bounds it.
func (nfcNorm) shrink() int { return 3 }

type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}
func (prependNorm) shrink() int { return 1 }

type replaceNorm struct{ old, new string }

func (r replaceNorm) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }
func (r replaceNorm) shrink() int {
	if r.new == "" {
		return 0
	}
	return max(1, (len(r.old)+len(r.new)-1)/len(r.new))
}

// lowercaseNorm is Hugging Face's Lowercase: Rust's char::to_lowercase,
// the full (unconditional) case mapping, which differs from Go's simple
// one only in U+0130 (İ becomes "i\u0307"; final sigma is not special).
type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "\u0130", "i\u0307"))
}
func (lowercaseNorm) shrink() int { return 3 }

type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, isWhiteSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, isWhiteSpace)
	}
	return s
}
func (stripNorm) shrink() int { return 0 }

type seqNorm []normalizer

func (q seqNorm) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

func (q seqNorm) shrink() int {
	f := 1
	for _, n := range q {
		k := n.shrink()
		if k == 0 {
			return 0
		}
		f *= k
	}
	return f
}
