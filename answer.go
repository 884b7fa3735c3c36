package redlimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redlimit/redlimit/core"
)

// How a policy answers an HTTP request that may not proceed: its status
// and body (headers.go writes the rate-limit fields of every verdict).

// answerer is how a policy answers: the options that shape its headers and
// its denials.
type answerer struct {
	profile   HeaderProfile
	resetUnix bool
	jitter    time.Duration
	pkSecret  []byte
	problem   bool
	handler   func(http.ResponseWriter, *http.Request, Decision) // WithDenyHandler's
}

func (a *answerer) check() error {
	switch {
	case a.profile < HeadersXRateLimit || a.profile > HeadersNone:
		return fmt.Errorf("redlimit: unknown header profile %d", a.profile)
	case a.jitter < 0:
		return fmt.Errorf("redlimit: negative Retry-After jitter %v", a.jitter)
	case a.pkSecret != nil && len(a.pkSecret) < 16:
		return fmt.Errorf("redlimit: WithPartitionKey: a secret of %d bytes; want at least 16", len(a.pkSecret))
	}
	return nil
}

// deny answers a request whose Decision is not Allowed: with the deny
// handler if one was given, else with d's Answer. The rate-limit fields
// are set already (a 503's Retry-After: 1 too).
func (a *answerer) deny(w http.ResponseWriter, r *http.Request, d Decision) {
	if a.handler != nil {
		a.handler(w, r, d)
		return
	}
	contentType, body := d.Answer()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// Answer returns the body of the answer to a request that may not proceed
// (d not Allowed), and its Content-Type: the JSON object
// {"error":"rate limit exceeded","retry_after":3} (retry_after, the
// Retry-After sent, absent on a 400), or, when the policy has
// WithProblemDetails, an RFC 9457 problem: a 429 as the IETF draft's
// quota-exceeded type naming the policies that denied
// ("violated-policies"), a 503 or 400 as about:blank. Its "error" or
// "detail" is Message. The body ends in a newline.
//
// The HTTP adapters write it, with d.Status, X-Content-Type-Options:
// nosniff and the rate-limit fields, unless WithDenyHandler replaces it.
// An adapter for a framework not built on net/http (fiber, fasthttp)
// calls ServeRequest for the Decision and the fields, and writes
// d.Status, the fields and this body in its own way.
func (d Decision) Answer() (contentType string, body []byte) {
	if d.problem {
		return "application/problem+json", problemBody(d)
	}
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, d.Message()...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if d.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, retryAfterSeconds(d.RetryAfter), 10)
	}
	return "application/json; charset=utf-8", append(buf, "}\n"...)
}

// Message returns a short text for the answer to a request that may not
// proceed, after its Status and error: "rate limit exceeded" (429), "rate
// limiter unavailable" (503), and for a 400 what was wrong with the
// request ("request has no rate limit key", "request's rate limits could
// not be chosen", "request's rate limits are invalid", "request costs
// more than its rate limit allows"). It never contains error details.
// Answer's body and grpclimit's status messages carry it; "" when d is
// Allowed.
func (d Decision) Message() string {
	switch {
	case d.Status == 0:
		return ""
	case d.Status == http.StatusTooManyRequests:
		return "rate limit exceeded"
	case d.Status != http.StatusBadRequest:
		return "rate limiter unavailable"
	case errors.Is(d.Err, core.ErrInvalidCost):
		return "request costs more than its rate limit allows"
	case errors.Is(d.Err, core.ErrInvalidLimit):
		return "request's rate limits are invalid"
	case errors.As(d.Err, new(pickError)):
		return "request's rate limits could not be chosen"
	}
	return "request has no rate limit key"
}

// Problem types of the answers WithProblemDetails writes.
const (
	// problemQuotaExceeded is the IETF draft's problem type for a request
	// that exceeds one or more quota policies.
	problemQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle         = "Request cannot be satisfied as assigned quota has been exceeded"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	Status     int      `json:"status"`
	Detail     string   `json:"detail,omitempty"`
	Violated   []string `json:"violated-policies,omitempty"`
	RetryAfter int64    `json:"retry_after,omitempty"`
}

// problemBody is d as an RFC 9457 problem: a denial as the draft's
// quota-exceeded type naming the policies that denied, any other answer
// as about:blank with its status's text.
func problemBody(d Decision) []byte {
	pr := problem{Type: "about:blank", Title: http.StatusText(d.Status), Status: d.Status, Detail: d.Message()}
	if d.RetryAfter > 0 {
		pr.RetryAfter = retryAfterSeconds(d.RetryAfter)
	}
	if d.Status == http.StatusTooManyRequests {
		pr.Type, pr.Title, pr.Violated = problemQuotaExceeded, problemTitle, d.violated
	}
	body, _ := json.Marshal(pr) // strings and numbers only: no error
	return append(body, '\n')
}

// violated names the list members that denied.
func violated(quotas []quota, each []core.Result) []string {
	var names []string
	for i, r := range each {
		if !r.Allowed {
			names = append(names, quotas[i].name)
		}
	}
	return names
}
