package tandem

import (
	"errors"
	"fmt"
)

// Error codes of the outside contract (docs/api.md). Every
// error that reaches a client carries one of them; web maps them to HTTP
// statuses.
const (
	EINVALID              = "invalid_request"
	EUNAUTHORIZED         = "unauthorized"
	EFORBIDDEN            = "forbidden"
	ENOTFOUND             = "not_found"
	EUNKNOWNSHOP          = "unknown_shop"
	EUNKNOWNPOD           = "unknown_pod"
	EINSUFFICIENT         = "insufficient_inventory"
	ECONFLICT             = "conflict"
	ETRANSITIONREFUSED    = "transition_refused"
	EALREADYCLAIMED       = "already_claimed"
	EGONE                 = "gone"
	EPAYLOADTOOLARGE      = "payload_too_large"
	EUNSUPPORTEDMEDIATYPE = "unsupported_media_type"
	EUNAVAILABLE          = "unavailable"
	EINTERNAL             = "internal"
)

// Error is an error with a code of the contract, a message safe to show a
// client and optional details: the error JSON of every non-2xx answer.
type Error struct {
	Code    string
	Message string
	Details map[string]any
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("tandem error: code=%s message=%s", e.Code, e.Message)
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code string, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithDetail returns a copy of e with one more detail.
func (e *Error) WithDetail(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// ErrorCode returns the code of the first *Error in err's chain, "" for a
// nil err and EINTERNAL for anything else.
func ErrorCode(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the first *Error in err's chain, or a
// generic message for internal errors, whose text may hold secrets.
func ErrorMessage(err error) string {
	var e *Error
	if err == nil {
		return ""
	} else if errors.As(err, &e) {
		return e.Message
	}
	return "internal error"
}

// ErrorDetails returns the details of the first *Error in err's chain.
func ErrorDetails(err error) map[string]any {
	var e *Error
	if errors.As(err, &e) {
		return e.Details
	}
	return nil
}
