package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/internal/adaptertest"
)

func init() { gin.SetMode(gin.TestMode) }

// app builds the suite's app on a gin engine: global middleware and rules
// with r.Use, per-route middleware in the route's handler list.
func app(s adaptertest.Spec) (http.Handler, error) {
	ok := func(c *gin.Context) { c.String(http.StatusOK, "ok") }
	r := gin.New()
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

var adapter = adaptertest.Adapter{Name: "gin", App: app}

func TestConformance(t *testing.T) {
	t.Parallel()
	adaptertest.Run(t, adapter)
}

// BenchmarkMiddleware: go test ./ginlimit -run X -bench . -benchmem; the
// middleware's cost is "limited" minus "bare".
func BenchmarkMiddleware(b *testing.B) { adaptertest.Bench(b, adapter) }
