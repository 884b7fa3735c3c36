package envoyrls

import (
	"strconv"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The fields written here follow what redlimit's HTTP layer writes
// (docs/headers.md): the root package's writer takes its own policy type,
// so an RLS answer, one decision per descriptor, writes them here in the
// same words.

// headers returns the rate-limit fields of an answer whose binding
// descriptor is vs[binding]: X-RateLimit-Limit (its capacity),
// -Remaining and -Reset (seconds until its allowance is full), the
// draft's RateLimit-Policy and RateLimit with a member per limited
// descriptor, and when the answer is OVER_LIMIT Retry-After (seconds,
// rounded up, at least 1; the limit's period for a request that can
// never pass). Every time is turned into seconds as the HTTP layer's
// (redlimit.RetryAfter and redlimit.Seconds).
func (s *Server) headers(vs []verdict, binding int, denied bool) []*corev3.HeaderValue {
	b := &vs[binding]
	var out []*corev3.HeaderValue
	var retryAfter int64
	if denied {
		retryAfter = max(1, redlimit.Seconds(redlimit.RetryAfter(b.res, 0)))
		out = append(out, headerValue("retry-after", strconv.FormatInt(retryAfter, 10)))
	}
	if s.opts.Headers == redlimit.HeadersXRateLimit || s.opts.Headers == redlimit.HeadersBoth {
		out = append(out,
			headerValue(s.names.Limit, strconv.Itoa(capacity(b))),
			headerValue(s.names.Remaining, strconv.Itoa(max(0, b.res.Remaining))),
			headerValue(s.names.Reset, strconv.FormatInt(redlimit.Seconds(b.res.ResetAfter), 10)))
	}
	if s.opts.Headers == redlimit.HeadersDraft || s.opts.Headers == redlimit.HeadersBoth {
		var pol, rl []string
		for i := range vs {
			v := &vs[i]
			if !v.limited || v.err != nil {
				continue
			}
			name := v.m.rule.name
			if name == "" {
				name = v.m.metric
			}
			pol = append(pol, policyItem(name, v))
			item := httpsfv.NewItem(printable(name))
			item.Params.Add("r", int64(max(0, v.res.Remaining)))
			if t := redlimit.Seconds(v.res.NextAfter); t > 0 && (!denied || t <= retryAfter) {
				item.Params.Add("t", t)
			}
			rl = append(rl, marshal(item))
		}
		out = append(out,
			headerValue("ratelimit-policy", strings.Join(pol, ", ")),
			headerValue("ratelimit", strings.Join(rl, ", ")))
	}
	return out
}

// capacity is how many events the descriptor's limit lets pass at once;
// 0 for a limit of 0.
func capacity(v *verdict) int {
	if v.rate == 0 {
		return 0
	}
	return v.limit.Capacity()
}

// policyItem is the RateLimit-Policy member of a descriptor's limit:
// "name";q=<rate>;w=<period in seconds>, and ;redlimit-burst=<capacity>
// where the capacity differs from the rate, as redlimit's HTTP layer
// writes it. Every unit of the format is a whole number of seconds; a
// calendar window's w is the window now is in, as long as the calendar
// has it (2 592 000 s in November).
func policyItem(name string, v *verdict) string {
	item := httpsfv.NewItem(printable(name))
	item.Params.Add("q", int64(v.rate))
	window := v.limit.Period
	if start, end, ok := v.limit.Window(time.Now()); ok {
		window = end.Sub(start)
	}
	item.Params.Add("w", int64(window/time.Second))
	if c := capacity(v); c != v.rate {
		item.Params.Add("redlimit-burst", int64(c))
	}
	return marshal(item)
}

// marshal writes a structured-field item; the names are printable ASCII
// and the parameters integers, so it cannot fail.
func marshal(item httpsfv.Item) string {
	s, err := httpsfv.Marshal(item)
	if err != nil {
		return ""
	}
	return s
}

// printable returns s with every byte that is not printable ASCII as '?',
// so that it can be a structured-field string.
func printable(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] < 0x20 || b[j] > 0x7e {
					b[j] = '?'
				}
			}
			return string(b)
		}
	}
	return s
}

// validHeaderName reports whether s is an HTTP field name (a token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// headersOf returns the fields an answer asks Envoy to add: with
// Options.Reference, the reference server's (when HeaderNames are given,
// as its LIMIT_RESPONSE_HEADERS_ENABLED), else those of Options.Headers
// for the binding descriptor (core.Binding of the limited descriptors,
// each allowed as its status says).
func (s *Server) headersOf(vs []verdict, resp *rlsv3.RateLimitResponse) []*corev3.HeaderValue {
	if s.opts.Reference {
		if !s.refHeaders {
			return nil
		}
		return s.referenceHeaders(vs, resp.GetStatuses())
	}
	if s.opts.Headers == redlimit.HeadersNone {
		return nil
	}
	var answered []core.Result // the limited verdicts' results, for core.Binding
	var at []int               // their indices in vs
	for i := range vs {
		v := &vs[i]
		if !v.limited || v.err != nil {
			continue
		}
		r := v.res
		r.Allowed = resp.GetStatuses()[i].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT
		answered, at = append(answered, r), append(at, i)
	}
	if len(answered) == 0 {
		return nil
	}
	_, binding := core.Binding(answered)
	return s.headers(vs, at[binding], resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT)
}
