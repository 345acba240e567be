package serve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
)

// Error types of the OpenAI error body.
const (
	typeInvalidRequest = "invalid_request_error"
	typeRateLimit      = "rate_limit_error"
	typeServer         = "server_error"
)

// apiError is an error answered with an OpenAI-style body:
//
//	{"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
//
// param and code are null when empty.
type apiError struct {
	status  int
	typ     string
	param   string
	code    string
	message string
	// retryAfter, when positive, is sent as Retry-After (seconds).
	retryAfter int
}

func (e *apiError) Error() string { return e.message }

// badRequest is a 400 about param (empty: the request as a whole).
func badRequest(param, code, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: typeInvalidRequest, param: param, code: code,
		message: fmt.Sprintf(format, args...)}
}

// Codes of 400 answers.
const (
	codeInvalidJSON      = "invalid_json"
	codeUnknownParameter = "unknown_parameter"
	codeUnsupported      = "unsupported_parameter"
	codeInvalidType      = "invalid_type"
	codeInvalidValue     = "invalid_value"
	codeMissing          = "missing_required_parameter"
	codeContextLength    = "context_length_exceeded"
)

// internalError is a 500 that tells the client nothing of the server's
// insides (allocators, devices, pools): the error goes to the log under
// id, which the answer gives so that an operator can find it.
func internalError(log *slog.Logger, id, what string, err error) *apiError {
	log.Error(what+" failed", "request_id", id, "err", err)
	return &apiError{status: http.StatusInternalServerError, typ: typeServer, code: "internal_error",
		message: fmt.Sprintf("internal server error (%s failed); the server's log has the details under request id %s", what, id)}
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (e *apiError) body() errorBody {
	return errorBody{Error: errorDetail{Message: e.message, Type: e.typ, Param: nilIfEmpty(e.param), Code: nilIfEmpty(e.code)}}
}

// writeError answers e as a JSON body.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, e.body())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"internal error encoding the response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
