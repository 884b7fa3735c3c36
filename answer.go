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
// handler if one was given, else with an RFC 9457 problem under
// WithProblemDetails, else with the JSON body
// {"error":"...","retry_after":N}. The rate-limit fields are set
// already (a 503's Retry-After: 1 too).
func (a *answerer) deny(w http.ResponseWriter, r *http.Request, d Decision) {
	switch {
	case a.handler != nil:
		a.handler(w, r, d)
	case a.problem:
		writeProblem(w, d)
	default:
		writeJSON(w, d)
	}
}

// message is a short, safe text for the answer to a request that does not
// pass; it never contains error details.
func message(d Decision) string {
	switch {
	case d.Status == http.StatusTooManyRequests:
		return "rate limit exceeded"
	case d.Status != http.StatusBadRequest:
		return "rate limiter unavailable"
	case errors.Is(d.Err, core.ErrInvalidCost):
		return "request costs more than its rate limit allows"
	case errors.Is(d.Err, core.ErrInvalidLimit):
		return "request's rate limits are invalid"
	}
	return "request has no rate limit key"
}

// writeJSON writes d's status and {"error":"...","retry_after":N}, N being
// the Retry-After sent (absent on 400).
func writeJSON(w http.ResponseWriter, d Decision) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	buf := make([]byte, 0, 64)
	buf = append(buf, `{"error":"`...)
	buf = append(buf, message(d)...) // a fixed message: nothing to escape
	buf = append(buf, '"')
	if d.RetryAfter > 0 {
		buf = append(buf, `,"retry_after":`...)
		buf = strconv.AppendInt(buf, retryAfterSeconds(d.RetryAfter), 10)
	}
	buf = append(buf, "}\n"...)
	_, _ = w.Write(buf)
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

// writeProblem writes d as an RFC 9457 problem: a denial as the draft's
// quota-exceeded type naming the policies that denied, any other answer
// as about:blank with its status's text.
func writeProblem(w http.ResponseWriter, d Decision) {
	pr := problem{Type: "about:blank", Title: http.StatusText(d.Status), Status: d.Status, Detail: message(d),
		RetryAfter: retryAfterSeconds(d.RetryAfter)}
	if d.RetryAfter <= 0 {
		pr.RetryAfter = 0
	}
	if d.Status == http.StatusTooManyRequests {
		pr.Type, pr.Title, pr.Violated = problemQuotaExceeded, problemTitle, d.violated
	}
	body, err := json.Marshal(pr)
	if err != nil { // not reached: strings and numbers only
		writeJSON(w, d)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = w.Write(append(body, '\n'))
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
