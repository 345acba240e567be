package serve

import (
	"net/http"
	"slices"
	"strings"
)

// CORS: browsers may call the API from the origins in
// Options.AllowedOrigins ("*" for any). A preflight (OPTIONS with
// Access-Control-Request-Method) is answered before the API key is checked,
// as browsers send it without credentials: 204 with the allowed methods and
// headers for an allowed origin, 403 otherwise. Actual requests from an
// allowed origin carry Access-Control-Allow-Origin and expose the headers
// a client reads (X-Request-Id, Retry-After).

const (
	corsMethods = "GET, POST, OPTIONS"
	corsExpose  = "X-Request-Id, Retry-After"
	corsMaxAge  = "600"
)

func (s *Server) originAllowed(origin string) bool {
	return origin != "" && (slices.Contains(s.opts.AllowedOrigins, "*") || slices.Contains(s.opts.AllowedOrigins, origin))
}

// cors sets the CORS headers of a request and answers a preflight,
// reporting whether it did (then nothing else is to be done).
func (s *Server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
	if origin == "" {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	if !s.originAllowed(origin) {
		if preflight {
			writeError(w, &apiError{status: http.StatusForbidden, typ: typeInvalidRequest, code: "cors_origin_not_allowed",
				message: "cross-origin requests from " + origin + " are not allowed (the server's --allowed-origins)"})
		}
		return preflight
	}
	h.Set("Access-Control-Allow-Origin", origin)
	if !preflight {
		h.Set("Access-Control-Expose-Headers", corsExpose)
		return false
	}
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", corsMethods)
	if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
		h.Set("Access-Control-Allow-Headers", req)
	} else {
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id")
	}
	h.Set("Access-Control-Max-Age", corsMaxAge)
	w.WriteHeader(http.StatusNoContent)
	return true
}

// ParseOrigins splits a comma-separated list of origins (as the
// --allowed-origins flag takes it), dropping blanks and a trailing slash.
func ParseOrigins(list string) []string {
	var out []string
	for _, o := range strings.Split(list, ",") {
		if o = strings.TrimSuffix(strings.TrimSpace(o), "/"); o != "" {
			out = append(out, o)
		}
	}
	return out
}
