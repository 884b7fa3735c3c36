package redlimit

import (
	"context"
	"net/http"
	"strings"
)

// Request is a request as a policy decides it: what every protocol can
// say of one. Serve builds it from an *http.Request; grpclimit builds it
// from a gRPC call's context, metadata and peer.
type Request struct {
	// Context is the request's: it bounds the decision, and a shaping
	// limit's wait ends with it.
	Context context.Context
	// Method is the HTTP method; "POST" for a gRPC call.
	Method string
	// Route is the route template ("GET /users/{id}", or gin's and echo's
	// "/users/:id"), "" when unknown; a gRPC call's full method
	// ("/pkg.Service/Method").
	Route string
	// Path is the URL path; a gRPC call's full method. Rules match it.
	Path string
	// Host is the host the request was sent to: HTTP's Host, a gRPC
	// call's :authority.
	Host string
	// Peer is the address of the peer it came from, as
	// http.Request.RemoteAddr writes it ("192.0.2.1:1234").
	Peer string
	// Metadata is a gRPC call's incoming metadata, keys in lowercase; nil
	// for an HTTP request, whose header is HTTP's.
	Metadata map[string][]string
	// HTTP is the HTTP request, nil for a request of another protocol.
	// The options that take an *http.Request are HTTP's: without one, a
	// keyfunc.Func (WithKey) finds no key, WithSkip skips nothing and
	// WithRequestLimits picks the policy's own limits, and WithObserver
	// and WithResponseCost get a nil *http.Request. grpclimit refuses the
	// first three and has options of its own that read a call.
	HTTP *http.Request

	rec *record // the request's record (ContextWithDecisions), nil when its context has none
}

// Values returns the values of the header field (HTTP) or metadata key
// (gRPC) name, which is matched in any case.
func (q *Request) Values(name string) []string {
	if q.HTTP != nil {
		return q.HTTP.Header.Values(name)
	}
	return q.Metadata[strings.ToLower(name)]
}
