package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// duplicateKey reports the first key an object of a JSON document gives
// twice, as a path ("messages[1].role"). encoding/json keeps the last
// value of a repeated key; a client that sends two means one of them, and
// the server must not guess which. body must be valid JSON.
func duplicateKey(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	path, dup := walkDuplicates(dec, "")
	return path, dup
}

// walkDuplicates reads one value from dec, reporting a duplicate key in it.
func walkDuplicates(dec *json.Decoder, at string) (string, bool) {
	tok, err := dec.Token()
	if err != nil {
		return "", false
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return "", false
	}
	switch d {
	case '{':
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", false
			}
			k, _ := kt.(string)
			p := k
			if at != "" {
				p = at + "." + k
			}
			if seen[k] {
				return p, true
			}
			seen[k] = true
			if path, dup := walkDuplicates(dec, p); dup {
				return path, true
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if path, dup := walkDuplicates(dec, fmt.Sprintf("%s[%d]", at, i)); dup {
				return path, true
			}
		}
	}
	dec.Token() // the closing delimiter
	return "", false
}
