package redlimit_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

func TestParseRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		doc  string
		want redlimit.Rules
	}{
		{`{"POST /login": "5/m", "GET /api/*": "100/s"}`, redlimit.Rules{"POST /login": "5/m", "GET /api/*": "100/s"}},
		{" \n\t{\"/\": \"1000/m\"}\n ", redlimit.Rules{"/": "1000/m"}},
		{`{"GET \/users\/{id}": "3/m sliding_log", "/x\u00e9": "1/s"}`, redlimit.Rules{"GET /users/{id}": "3/m sliding_log", "/xé": "1/s"}},
	} {
		got, err := redlimit.ParseRules([]byte(tt.doc))
		if err != nil || !maps.Equal(got, tt.want) {
			t.Errorf("ParseRules(%s) = %v, %v; want %v", tt.doc, got, err, tt.want)
		}
	}
}

// TestParseRulesNoLimit: a document that would leave every request
// unlimited, or that is not a table of pattern to limit string, is an
// error that says what is wrong.
func TestParseRulesNoLimit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, says string }{
		{`null`, "got null"},
		{` null `, "got null"},
		{`[]`, "got an array"},
		{`[{"/x": "5/m"}]`, "got an array"},
		{`""`, "got a string"},
		{`"5/m"`, "got a string"},
		{`5`, "got a number"},
		{`-1.5e3`, "got a number"},
		{`true`, "got a boolean"},
		{``, "empty document"},
		{" \n\t", "empty document"},
		{`{}`, "no rules"},
		{` { } `, "no rules"},
		{`{"/x": ""}`, `rule "/x": ` + core.ErrInvalidLimit.Error() + `: empty limit`},
		{`{"/x": "  "}`, `rule "/x": ` + core.ErrInvalidLimit.Error() + `: empty limit`},
		{`{"/x": null}`, `rule "/x": the limit must be a string, not null`},
		{`{"/x": 5}`, `rule "/x": the limit must be a string, not 5`},
		{`{"/x": {"rate": 5}}`, `rule "/x": the limit must be a string`},
		{`{"/x": ["5/m"]}`, `rule "/x": the limit must be a string`},
		{`{"/x": "5/m"`, "want a JSON object"},
		{`{"/x" "5/m"}`, "want a JSON object"},
		{`{"/x": "5/m",}`, "want a JSON object"},
		{`{"/x": "5/m"} {"/y": "1/s"}`, "after the rules object"},
		{`{"/x": "5/m"} garbage`, "after the rules object"},
		{`{"/x": "5/m"}]`, "after the rules object"},
	} {
		rules, err := redlimit.ParseRules([]byte(tt.doc))
		if !isRulesError(err) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParseRules(%s) = %v, %v; want an ErrInvalidRules error saying %q", tt.doc, rules, err, tt.says)
		}
		if rules != nil {
			t.Errorf("ParseRules(%s) returned rules %v with its error", tt.doc, rules)
		}
	}
	if _, err := redlimit.ParseRules([]byte(`{"/x": ""}`)); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("an empty limit string: error %v does not wrap core.ErrInvalidLimit", err)
	}
}

// TestParseRulesDuplicates: a pattern given twice is an error naming it,
// not the last one silently winning, however it is spelled in JSON.
func TestParseRulesDuplicates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ doc, pattern string }{
		{`{"/a": "5/m", "/a": "10/m"}`, "/a"},
		{`{"/a": "5/m", "/b": "1/s", "/a": "5/m"}`, "/a"},
		{`{"/b": "1/s", "/a": "5/m", "\/a": "10/m"}`, "/a"},
		{`{"GET /a": "5/m", "GET /\u0061": "10/m"}`, "GET /a"},
		{`{"POST /login": "5/m", "/": "1/s", "/": "1/s"}`, "/"},
	} {
		rules, err := redlimit.ParseRules([]byte(tt.doc))
		if !isRulesError(err) || !strings.Contains(err.Error(), `pattern "`+tt.pattern+`" is given twice`) {
			t.Errorf("ParseRules(%s) = %v, %v; want an ErrInvalidRules error naming pattern %q", tt.doc, rules, err, tt.pattern)
		}
	}
}

// TestNewRuleSetNoLimit: a table built in Go is held to the same rules as
// one parsed from JSON: empty is an error, not a set that limits nothing.
func TestNewRuleSetNoLimit(t *testing.T) {
	t.Parallel()
	lim := core.New(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	for _, rules := range []redlimit.Rules{nil, {}} {
		rs, err := redlimit.NewRuleSet(lim, rules)
		if !isRulesError(err) || !strings.Contains(err.Error(), "no rules") {
			t.Errorf("NewRuleSet(%#v) = %v, %v; want an ErrInvalidRules error saying \"no rules\"", rules, rs, err)
		}
	}
	for _, spec := range []string{"", " "} {
		_, err := redlimit.NewRuleSet(lim, redlimit.Rules{"/ok": "1/s", "/x": spec})
		if !errors.Is(err, core.ErrInvalidLimit) || !strings.Contains(err.Error(), `rule "/x"`) {
			t.Errorf("NewRuleSet with limit %q: error %v, want an ErrInvalidLimit error naming rule \"/x\"", spec, err)
		}
	}
	if _, err := redlimit.NewRuleSet(lim, redlimit.Rules{"/x": "1/s"}); err != nil {
		t.Errorf("NewRuleSet with one rule: %v", err)
	}
}

func isRulesError(err error) bool { return errors.Is(err, redlimit.ErrInvalidRules) }
