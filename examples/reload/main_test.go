package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/internal/redistest"
)

func TestMain(m *testing.M) { run.TestMain(m, main) }

// TestHelp: -h names the flag and the environment variables.
func TestHelp(t *testing.T) {
	run.CheckHelp(t, "Usage: go run ./examples/reload", "-rules", "SIGHUP", "ADDR", "REDIS_URL")
}

// TestSample: the sample rules file is a valid table.
func TestSample(t *testing.T) {
	path, err := writeSample()
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	if _, err := load(core.New(rdb), path); err != nil {
		t.Fatal(err)
	}
}

// app is the example's app on a rules file of a test's, with a Limiter
// whose clock stands still.
type app struct {
	t    *testing.T
	path string
	rs   *redlimit.RuleSet
	h    http.Handler
}

func newTestApp(t *testing.T, rdb *redis.Client, rules string) *app {
	a := &app{t: t, path: filepath.Join(t.TempDir(), "rules.json")}
	a.write(rules)
	still := time.Now()
	rs, err := load(core.New(rdb, core.WithClock(func() time.Time { return still }), core.WithTimeout(10*time.Second)), a.path)
	if err != nil {
		t.Fatal(err)
	}
	a.rs, a.h = rs, newApp(rs)
	return a
}

// write replaces the rules file.
func (a *app) write(rules string) {
	a.t.Helper()
	if err := os.WriteFile(a.path, []byte(rules), 0o600); err != nil {
		a.t.Fatal(err)
	}
}

// send sends a request and checks its status and X-RateLimit-Limit.
func (a *app) send(what, method, path string, status int, limit string) {
	a.t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = "198.51.100.9:4000"
	w := httptest.NewRecorder()
	a.h.ServeHTTP(w, r)
	if w.Code != status || w.Header().Get("X-RateLimit-Limit") != limit {
		a.t.Fatalf("%s: %d, X-RateLimit-Limit %q; want %d, %q", what, w.Code, w.Header().Get("X-RateLimit-Limit"), status, limit)
	}
}

// TestReload: a reload puts the file's rules in force, keeping the count
// of a rule whose pattern and algorithm stay; a file with a mistake is
// refused, with an error naming what is wrong, and the rules stay.
func TestReload(t *testing.T) {
	for name, client := range map[string]func(t *testing.T) *redis.Client{
		"miniredis": func(t *testing.T) *redis.Client {
			return redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		},
		"redis-server": func(t *testing.T) *redis.Client { return redistest.Standalone(t).Client(t) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := client(t)
			t.Cleanup(func() { rdb.Close() })
			a := newTestApp(t, rdb, `{"POST /login": "2/m fixed_window"}`)
			a.send("login 1", "POST", "/login", http.StatusOK, "2")
			a.send("login 2", "POST", "/login", http.StatusOK, "2")
			a.send("login 3", "POST", "/login", http.StatusTooManyRequests, "2")
			a.send("hello, no rule", "GET", "/hello", http.StatusOK, "")

			a.write(`{"POST /login": "3/m fixed_window", "GET /hello": "1/m"}`)
			if err := reload(a.rs, a.path); err != nil {
				t.Fatal(err)
			}
			a.send("login 3 after the reload: the count of 2 kept", "POST", "/login", http.StatusOK, "3")
			a.send("login 4", "POST", "/login", http.StatusTooManyRequests, "3")
			a.send("hello", "GET", "/hello", http.StatusOK, "1")
			a.send("hello again", "GET", "/hello", http.StatusTooManyRequests, "1")

			for _, bad := range []struct{ rules, says string }{
				{`{"get /hello": "100/m"}`, `rule "get /hello": method "get"`},
				{`{"GET /hello": "100/m", "GET /hello": "5/m"}`, `pattern "GET /hello" is given twice`},
				{`{"GET /users/:id": "100/m"}`, `":id" is gin's and echo's parameter syntax`},
				{`{"GET /hello": "lots"}`, `rule "GET /hello"`},
				{`{"GET /hello": "100/m",}`, "want a JSON object"},
				{``, "empty document"},
			} {
				a.write(bad.rules)
				if err := reload(a.rs, a.path); err == nil || !strings.Contains(err.Error(), bad.says) {
					t.Errorf("reload of %s: %v; want an error saying %q", bad.rules, err, bad.says)
				}
			}
			if err := reload(a.rs, filepath.Join(t.TempDir(), "missing.json")); !os.IsNotExist(err) {
				t.Errorf("reload of a missing file: %v", err)
			}
			a.send("login after refused reloads", "POST", "/login", http.StatusTooManyRequests, "3")
			a.send("hello after refused reloads", "GET", "/hello", http.StatusTooManyRequests, "1")
		})
	}
}
