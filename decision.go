package redlimit

import (
	"net/http"
	"strconv"

	"github.com/redlimit/redlimit/core"
)

// Decision is the outcome of the request flow for one request.
type Decision struct {
	// Policy is the name of the policy that decided.
	Policy string
	// Key is the request's key, from the key function, as the Limiter was
	// given it (hashed when long); the policy's name is the scope of its
	// state (see core.Term). "" when skipped or when the key function
	// failed.
	Key string
	// Result is the limiter's answer. It is zero when the request was
	// skipped, had no key, or Redis failed under FailOpen or FailClosed.
	Result core.Result
	// Status is 0 when the request may proceed. Otherwise it is the status
	// to answer with: 429 Too Many Requests, 503 Service Unavailable
	// (FailClosed, or the client left while queued by a shaping limit) or
	// 400 Bad Request (the key function found no key).
	Status int
	// Err is the Redis error, the key function's error, or the context's
	// error when a queued client left; nil otherwise.
	Err error
	// Skipped is true when WithSkip exempted the request.
	Skipped bool
	// Local is true when the FailLocal fallback decided.
	Local bool
	// DryRun is true when the policy runs dry and would have denied.
	DryRun bool
}

// Allowed reports whether the request may proceed.
func (d Decision) Allowed() bool { return d.Status == 0 }

// Message is a short, safe text for the answer to a request that does not
// pass; it never contains error details.
func (d Decision) Message() string {
	switch d.Status {
	case 0:
		return ""
	case http.StatusTooManyRequests:
		return "rate limit exceeded"
	case http.StatusBadRequest:
		return "request has no rate limit key"
	default:
		return "rate limiter unavailable"
	}
}

// Body is the default JSON answer for a request that does not pass.
type Body struct {
	Error string `json:"error"`
	// RetryAfter is the Retry-After header's value, in seconds; omitted
	// when there is none (400).
	RetryAfter int64 `json:"retry_after,omitempty"`
}

// Body returns the default JSON body for d; gin's adapter sends it with
// AbortWithStatusJSON.
func (d Decision) Body() Body {
	b := Body{Error: d.Message()}
	switch d.Status {
	case http.StatusTooManyRequests:
		b.RetryAfter = max(1, seconds(d.Result.RetryAfter))
	case http.StatusServiceUnavailable:
		b.RetryAfter = 1
	}
	return b
}

// Deny answers a request whose Decision is not Allowed: with the deny
// handler if one was given, else with the default JSON Body.
func (p *Policy) Deny(w http.ResponseWriter, r *http.Request, d Decision) {
	if p.deny != nil {
		p.deny(w, r, d)
		return
	}
	WriteBody(w, d)
}

// HasDenyHandler reports whether WithDenyHandler was given, for adapters
// that answer in their framework's own way otherwise.
func (p *Policy) HasDenyHandler() bool { return p.deny != nil }

// WriteBody writes d's status and default JSON Body to w.
func WriteBody(w http.ResponseWriter, d Decision) {
	b := d.Body()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, b.Error...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if b.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, b.RetryAfter, 10)
	}
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
}
