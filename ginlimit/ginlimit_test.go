package ginlimit_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/internal/adaptertest"
	"github.com/redlimit/redlimit/keyfunc"
)

func init() { gin.SetMode(gin.TestMode) }

// app builds the suite's app on a gin engine: global middleware and rules
// with r.Use, per-route middleware in the route's handler list.
func app(s adaptertest.Spec) (http.Handler, error) {
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r := gin.New()
	if s.StoreUser != "" {
		r.Use(func(c *gin.Context) {
			if user := c.GetHeader("X-User"); user != "" {
				c.Set(s.StoreUser, user)
			}
		})
	}
	if s.Rules != nil {
		rules, err := ginlimit.Rules(s.Limiter, s.Rules, s.RulesOpts...)
		if err != nil {
			return nil, err
		}
		r.Use(rules)
	}
	if s.Global != nil {
		r.Use(ginlimit.New(s.Limiter, s.Global.Limit, s.Global.Opts...))
	}
	route := func(m *adaptertest.Mw) []gin.HandlerFunc {
		if m == nil {
			return []gin.HandlerFunc{ok}
		}
		return []gin.HandlerFunc{ginlimit.New(s.Limiter, m.Limit, m.Opts...), ok}
	}
	r.GET("/ping", ok)
	r.GET("/users/:id", route(s.Users)...)
	r.POST("/login", route(s.Login)...)
	if s.WorkHandler != nil {
		work := []gin.HandlerFunc{gin.WrapH(s.WorkHandler)}
		if s.Work != nil {
			work = append([]gin.HandlerFunc{ginlimit.New(s.Limiter, s.Work.Limit, s.Work.Opts...)}, work...)
		}
		r.POST("/work", work...)
	}
	return r, nil
}

var adapter = adaptertest.Adapter{Name: "gin", App: app, UserKey: ginlimit.Key}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

// BenchmarkMiddleware: go test ./ginlimit -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }

// TestKey: Key reads what an earlier handler stored with c.Set: strings,
// integers and fmt.Stringers make a key "<name>:<value>"; a missing or
// empty value, a value of another type, and a request that no ginlimit
// middleware decided are errors, answered 400.
func TestKey(t *testing.T) {
	t.Parallel()
	lim := adaptertest.Embedded(t, core.WithLogger(slog.New(slog.DiscardHandler)))
	var mu sync.Mutex
	var got []string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		if d.Err != nil {
			got = append(got, "error: "+d.Err.Error())
			return
		}
		got = append(got, d.Key)
	})
	for _, tt := range []struct {
		value  any // stored with c.Set("user", value); nil: nothing stored
		status int
		want   string
	}{
		{"alice", http.StatusOK, "user:alice"},
		{42, http.StatusOK, "user:42"},
		{uint64(7), http.StatusOK, "user:7"},
		{userID{9}, http.StatusOK, "user:id-9"},
		{nil, http.StatusBadRequest, `error: keyfunc: no key in request: no gin context value "user"`},
		{"", http.StatusBadRequest, `error: keyfunc: no key in request: gin context value "user" is empty`},
		{3.5, http.StatusBadRequest, `error: gin context value "user" is a float64`},
	} {
		got = nil
		r := gin.New()
		r.GET("/", func(c *gin.Context) {
			if tt.value != nil {
				c.Set("user", tt.value)
			}
		}, ginlimit.New(lim, core.PerMinute(100), redlimit.WithKey(ginlimit.Key("user")), observe), func(c *gin.Context) {})
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != tt.status || len(got) != 1 || !strings.HasPrefix(got[0], tt.want) {
			t.Errorf("c.Set(\"user\", %#v): %d, decided %q; want %d and %q", tt.value, w.Code, got, tt.status, tt.want)
		}
	}

	// Outside ginlimit's middleware there is no gin context to read.
	_, err := ginlimit.Key("user")(httptest.NewRequest(http.MethodGet, "/", nil))
	if !errors.Is(err, keyfunc.ErrNoKey) || !strings.Contains(err.Error(), "not decided by a ginlimit middleware") {
		t.Errorf("Key outside the middleware: %v", err)
	}
	// keyfunc.First falls back from a missing value.
	got = nil
	r := gin.New()
	r.GET("/", ginlimit.New(lim, core.PerMinute(100), redlimit.WithKey(keyfunc.First(ginlimit.Key("user"), keyfunc.IP())), observe))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.1:1"
	r.ServeHTTP(httptest.NewRecorder(), req)
	if len(got) != 1 || got[0] != "ip:192.0.2.1" {
		t.Errorf("First(Key, IP) without a user decided %q, want ip:192.0.2.1", got)
	}
}

type userID struct{ n int }

func (u userID) String() string { return fmt.Sprintf("id-%d", u.n) }

// TestCheckRules: a rule that no route of the engine can receive a request
// for is reported by name, as is a pattern in gin's syntax; rules that
// reach a route, the catch-all and host patterns pass.
func TestCheckRules(t *testing.T) {
	t.Parallel()
	r := gin.New()
	h := func(c *gin.Context) {}
	r.GET("/users/:id", h)
	r.POST("/login", h)
	r.GET("/static/*filepath", h)
	r.HEAD("/ping", h)
	api := r.Group("/api/v1")
	api.PUT("/orders/:id/items/:item", h)

	for _, rules := range []redlimit.Rules{
		{"*": "100/s", "GET /users/{id}": "5/m", "POST /login": "1/m"},
		{"/users/alice": "1/s", "GET /users/*": "1/s", "/users/": "1/s"},
		{"GET /static/css/site.css": "1/s", "/static/{path...}": "1/s"},
		{"GET /ping": "1/s"}, // a GET pattern matches HEAD requests
		{"PUT /api/v1/orders/{id}/items/{item}": "1/s", "/api/*": "1/s", "/api/v1/orders/7/items/2": "1/s"},
		{"api.example.com/login": "1/s"},
	} {
		if err := ginlimit.CheckRules(r, rules); err != nil {
			t.Errorf("CheckRules(%v): %v", rules, err)
		}
	}
	for _, tt := range []struct {
		rules redlimit.Rules
		says  string
	}{
		{redlimit.Rules{"GET /reports/{id}": "1/s", "*": "1/s"}, `rule "GET /reports/{id}": no route of the gin engine matches`},
		{redlimit.Rules{"POST /users/{id}": "1/s", "GET /login": "1/s"}, `rules "GET /login", "POST /users/{id}": no route`},
		{redlimit.Rules{"GET /users": "1/s"}, `rule "GET /users": no route`},
		{redlimit.Rules{"GET /users/{id}/posts": "1/s"}, `rule "GET /users/{id}/posts": no route`},
		{redlimit.Rules{"HEAD /users/{id}": "1/s"}, `rule "HEAD /users/{id}": no route`},
		{redlimit.Rules{"GET /users/:id": "1/s"}, `rule "GET /users/:id": ":id" is gin's and echo's parameter syntax`},
	} {
		err := ginlimit.CheckRules(r, tt.rules)
		if !errors.Is(err, redlimit.ErrInvalidRules) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("CheckRules(%v) = %v; want an ErrInvalidRules error saying %q", tt.rules, err, tt.says)
		}
	}
	// The hint about gin's and echo's ":id" comes only where a path has a ':'.
	for rule, hint := range map[string]bool{"GET /reports/{id}": false, "GET /logn": false, "GET /files/x_:name": true} {
		err := ginlimit.CheckRules(r, redlimit.Rules{rule: "1/s"})
		if err == nil || strings.Contains(err.Error(), "not :id") != hint {
			t.Errorf("CheckRules of %q = %v; want the \"{id}, not :id\" hint: %v", rule, err, hint)
		}
	}
}

// TestKeyMadeLate: a Key first made while a request is decided finds the
// gin context: the middleware depends on no process-wide state. (It once
// put the gin context where Key finds it only once some Key call,
// anywhere, had set a flag, so such a Key failed the process's first
// requests.) Not parallel: it runs before the parallel tests, which call
// Key.
func TestKeyMadeLate(t *testing.T) {
	lim := adaptertest.Embedded(t)
	var got []string
	observe := redlimit.WithObserver(func(r *http.Request, d redlimit.Decision) { got = append(got, d.Key) })
	late := func(r *http.Request) (string, error) { return ginlimit.Key("user")(r) } // Key's first call is in a request
	r := gin.New()
	r.GET("/", func(c *gin.Context) { c.Set("user", "alice") },
		ginlimit.New(lim, core.PerMinute(100), redlimit.WithKey(late), observe), func(c *gin.Context) {})
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusOK || len(got) != 1 || got[0] != "user:alice" {
		t.Fatalf("the first request: %d, keyed %q; want 200 and user:alice", w.Code, got)
	}
}
