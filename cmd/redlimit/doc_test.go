package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// updateDoc rewrites the sessions of docs/operations.md with what the
// tool prints: go test -run TestOperationsDoc ./cmd/redlimit -update-doc.
var updateDoc = flag.Bool("update-doc", false, "rewrite docs/operations.md's sessions with what the tool prints")

// docInstant is when the sessions of docs/operations.md run: the clock
// the service and the tool pass to Redis (core.WithClock), and miniredis's.
var docInstant = time.Date(2025, 11, 28, 15, 0, 0, 0, time.UTC)

func docClock() time.Time { return docInstant }

// TestOperationsDoc: docs/operations.md shows the tool as it is. Its files
// (a ```json block after "<!-- NAME -->") are written as NAME; its
// service (those rules keyed by tenant, and the login-user policy) serves
// the page's story on miniredis at docInstant; then every "$ redlimit"
// line of its ```text blocks runs, in order, and must print what follows
// it on the page (stdout, then stderr; the Redis URL written as
// redis://localhost:6379).
func TestOperationsDoc(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := regexp.MustCompile("(?s)<!-- ([a-z]+\\.json) -->\n```json\n(.*?)```\n").FindAllStringSubmatch(string(page), -1)
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[1]), []byte(f[2]), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := miniredis.RunT(t)
	m.SetTime(docInstant)
	url := "redis://" + m.Addr()
	release := docStory(t, redis.NewClient(&redis.Options{Addr: m.Addr()}), filepath.Join(dir, "rules.json"))
	defer release()

	sessions := regexp.MustCompile("(?s)```text\n(\\$ redlimit .*?)```\n").FindAllStringSubmatch(string(page), -1)
	if len(sessions) < 5 {
		t.Fatalf("%d sessions on the page", len(sessions))
	}
	for _, s := range sessions {
		lines := strings.SplitAfterN(s[1], "\n", 2)
		command, want := strings.TrimSpace(strings.TrimPrefix(lines[0], "$ redlimit ")), lines[1]
		args := shellWords(command)
		for i, a := range args {
			if _, err := os.Stat(filepath.Join(dir, a)); err == nil && strings.HasSuffix(a, ".json") {
				args[i] = filepath.Join(dir, a)
			}
		}
		var stdout, stderr bytes.Buffer
		run(context.Background(), args, func(k string) string { return map[string]string{"REDIS_URL": url}[k] }, &stdout, &stderr, docClock)
		got := strings.ReplaceAll(stdout.String()+stderr.String(), url, "redis://localhost:6379")
		got = strings.ReplaceAll(got, dir+string(filepath.Separator), "")
		if got != want && *updateDoc {
			page = bytes.Replace(page, []byte(s[1]), []byte(lines[0]+got), 1)
		} else if got != want {
			t.Errorf("$ redlimit %s\nprints\n%s\nthe page shows\n%s", command, got, want)
		}
	}
	if *updateDoc {
		if err := os.WriteFile("../../docs/operations.md", page, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// docStory serves the page's story: acme's month used up (38 requests,
// 20 searches and 2 exports that are still running), alice's 5 failed logins. It
// returns what ends the exports.
func docStory(t *testing.T, rdb *redis.Client, rulesFile string) (release func()) {
	rules, err := readRules(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	lim := core.New(rdb, core.WithTimeout(10*time.Second), core.WithClock(docClock))
	tenant := redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return "tenant:" + q.Values("X-Tenant")[0], nil })
	rs, err := redlimit.NewRuleSet(lim, rules, tenant)
	if err != nil {
		t.Fatal(err)
	}
	user := redlimit.WithRequestKey(func(q redlimit.Request) (string, error) { return "user:" + q.Values("X-User")[0], nil })
	login, err := redlimit.NewPolicy(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: 15 * time.Minute}, redlimit.WithName("login-user"), user)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	send := func(p redlimit.Policy, method, path, header, value string) int {
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set(header, value)
		w := httptest.NewRecorder()
		redlimit.Serve(p, w, r, func(http.ResponseWriter, *http.Request) int {
			if path == "/exports" {
				<-done
			}
			return http.StatusOK
		})
		return w.Code
	}
	for i := range 58 {
		path := "/items"
		if i < 20 { // the minute's searches
			path = "/search"
		}
		if code := send(rs, "GET", path, "X-Tenant", "acme"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	var running sync.WaitGroup
	for range 2 {
		running.Add(1)
		go func() { defer running.Done(); send(rs, "POST", "/exports", "X-Tenant", "acme") }()
	}
	waitFor(t, func() bool { return lim.Stats() == core.Stats{} && exportsHeld(t, lim) == 2 })
	for range 5 {
		send(login, "POST", "/login", "X-User", "alice")
	}
	return func() { close(done); running.Wait() }
}

// exportsHeld returns the slots acme holds under POST /exports.
func exportsHeld(t *testing.T, lim *core.Limiter) int {
	l, _ := core.ParseLimit("2 concurrent lease=5m")
	s, err := lim.Look(context.Background(), &core.Request{Key: "tenant:acme", Limits: []core.Limit{l}, Scopes: []string{"POST /exports"}})
	if err != nil {
		t.Fatal(err)
	}
	return s[0].Held
}

// shellWords splits a command line as a shell would, for the page's
// commands: words apart by spaces, '...' quoting.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				words, in = append(words, w.String()), false
				w.Reset()
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}
