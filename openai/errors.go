package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// Error is an API error with the HTTP status it maps to. Its JSON form is
// OpenAI's {"error":{"message","type","param","code"}}.
type Error struct {
	Status  int
	Message string
	Type    string
	Param   string // the offending request field, if any
	Code    string // a stable machine-readable code
	// RetryAfter, when positive, is sent as the Retry-After header (seconds).
	RetryAfter int
}

func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%s (param %s): %s", e.Code, e.Param, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Constructors for the statuses the frontend uses. Types follow OpenAI's
// names so SDKs map them to their exception classes.

func BadRequest(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func NotFoundModel(model string) *Error {
	return &Error{Status: http.StatusNotFound, Type: "invalid_request_error", Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("The model %q does not exist or no worker serves it.", model)}
}

func TooLarge(param, code, format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func Unavailable(code string, retryAfter int, format string, args ...any) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: "service_unavailable", Code: code, RetryAfter: retryAfter, Message: fmt.Sprintf(format, args...)}
}

func Internal(code, format string, args ...any) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: code, Message: fmt.Sprintf(format, args...)}
}

type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// JSON returns the error body.
func (e *Error) JSON() []byte {
	f := errorFields{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		f.Param = &e.Param
	}
	if e.Code != "" {
		f.Code = &e.Code
	}
	b, _ := json.Marshal(errorBody{Error: f}) // plain strings: cannot fail
	return b
}

// WriteError writes e as a complete non-streaming response.
func WriteError(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}

// AppendErrorEvent appends an SSE error event. After a stream has started the
// status line is gone, so errors travel in-band, followed by [DONE].
func AppendErrorEvent(dst []byte, e *Error) []byte {
	dst = append(dst, "data: "...)
	dst = append(dst, e.JSON()...)
	return append(dst, "\n\n"...)
}
