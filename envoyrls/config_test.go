package envoyrls

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// TestLoadReference: every example of the reference server's README, and
// its tests' basic configuration, load.
func TestLoadReference(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig("testdata/reference", ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(c.Domains()), 14; got != want {
		t.Errorf("%d domains, want %d: %v", got, want, c.Domains())
	}
	if c.Rules() == 0 {
		t.Error("no rules")
	}
}

// TestRejected: the files the reference server refuses are refused, with
// the file named, and the descriptor where there is one.
func TestRejected(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"bad_limit_unit.yaml":      `descriptor test-domain.key1_value1: invalid unit "foo"`,
		"bad_yaml.yaml":            "unexpected end of stream",
		"duplicate_key.yaml":       "descriptor test-domain.key1_value1 is given twice",
		"empty_domain.yaml":        "empty domain",
		"empty_key.yaml":           "descriptor test-domain.?_value1: empty key",
		"misspelled_key.yaml":      "field ratelimit not found",
		"misspelled_key2.yaml":     "field requestsperunit not found",
		"non_map_list.yaml":        "cannot unmarshal",
		"non_string_key.yaml":      "field 0.25 not found",
		"replaces_empty.yaml":      "descriptor test-domain.key1_value1.subkey1: replaces has an entry without a name",
		"replaces_self.yaml":       `descriptor test-domain.key1_value1.subkey1: replaces its own name "self"`,
		"unlimited_with_unit.yaml": "descriptor test-domain.foo: unlimited with a unit",
	}
	files, err := filepath.Glob("testdata/rejected/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(want) {
		t.Fatalf("%d files, want %d", len(files), len(want))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		_, err = ParseConfig([]File{{Name: f, Data: data}}, ConfigOptions{})
		if err == nil {
			t.Errorf("%s loaded", f)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), f+": ") || !strings.Contains(err.Error(), want[filepath.Base(f)]) {
			t.Errorf("%s: %v, want it to name the file and say %q", f, err, want[filepath.Base(f)])
		}
	}
}

// TestLargeRequestsPerUnit: requests_per_unit takes a uint32's whole
// range, as the reference's field is one, in every unit.
func TestLargeRequestsPerUnit(t *testing.T) {
	t.Parallel()
	for _, rpu := range []string{"1000000001", "2000000000", "4294967295"} {
		for _, unit := range []string{"second", "minute", "hour", "day", "week", "month", "year"} {
			data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + unit + ", requests_per_unit: " + rpu + "}\n"
			if _, err := ParseConfig([]File{{Name: "x.yaml", Data: []byte(data)}}, ConfigOptions{}); err != nil {
				t.Errorf("%s a %s: %v", rpu, unit, err)
			}
		}
	}
}

// TestMergeDomains: two files of one domain are refused unless merging is
// on; merged, each file's descriptors apply, and a descriptor given in
// both is refused.
func TestMergeDomains(t *testing.T) {
	t.Parallel()
	if _, err := LoadConfig("testdata/merge", ConfigOptions{}); err == nil || !strings.Contains(err.Error(), `merge_domain_key2.yaml: domain "test-domain" is configured in another file too`) {
		t.Errorf("without merging: %v", err)
	}
	c, err := LoadConfig("testdata/merge", ConfigOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Rules(), 2; got != want {
		t.Errorf("%d rules, want %d", got, want)
	}
	one := File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")}
	two := File{Name: "b.yaml", Data: one.Data}
	if _, err := ParseConfig([]File{one, two}, ConfigOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "b.yaml: descriptor d.k is given twice") {
		t.Errorf("a descriptor in two merged files: %v", err)
	}
}

// TestExtensionsRejected: extensions that cannot be enforced are refused
// with the descriptor named.
func TestExtensionsRejected(t *testing.T) {
	t.Parallel()
	for block, want := range map[string]string{
		"{unit: minute, requests_per_unit: 5, algorithm: fast}":                       "unknown algorithm",
		"{unit: minute, requests_per_unit: 5, algorithm: fixed_window, burst: 10}":    "burst",
		"{unit: minute, requests_per_unit: 5, calendar: Europe/Berlin}":               "calendar needs unit day, week or month",
		"{unit: day, requests_per_unit: 5, calendar: Mars/Olympus}":                   "Mars/Olympus",
		"{unit: day, requests_per_unit: 5, algorithm: gcra, calendar: UTC}":           "calendar needs algorithm fixed_window",
		"{unit: minute, requests_per_unit: 5, algorithm: concurrency}":                "not served",
		"{unit: minute, requests_per_unit: 5, bust: 10}":                              "field bust not found",
		"{unlimited: true, algorithm: gcra}":                                          "unlimited with algorithm",
		"{unit: minute}":                                                              "without requests_per_unit",
		"{unit: minute, requests_per_unit: -1}":                                       "not a uint32",
		"{unit: minute, requests_per_unit: 4294967296}":                               "not a uint32",
		"{unit: hour, requests_per_unit: 4294967295, algorithm: gcra}":                "cannot be counted exactly",
		"{unit: minute, requests_per_unit: 5, algorithm: sliding_window, buckets: 7}": "buckets",
	} {
		data := "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: " + block + "\n"
		_, err := ParseConfig([]File{{Name: "x.yaml", Data: []byte(data)}}, ConfigOptions{})
		if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "x.yaml") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", block, err, want)
		}
	}
}

// lookupRule returns "rpu/unit" of the rule a descriptor of key=value
// pairs matches in domain, or "none".
func lookupRule(c *Config, domain string, kv ...string) string {
	var entries []*ratelimitv3.RateLimitDescriptor_Entry
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	m := c.lookup(domain, entries)
	if m.rule == nil {
		return "none"
	}
	return fmt.Sprintf("%d/%s", m.rule.rate, m.rule.unit)
}

// TestWildcardAnywhere: a '*' anywhere in a value matches as the
// reference server matches it (test/config/wildcard.yaml and its
// TestWildcardConfig; README Example 9): zero or more bytes each, in
// order, the literal parts before, between and after.
func TestWildcardAnywhere(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]File{{Name: "wildcard.yaml", Data: []byte(`
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: noWild
    value: foo
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 21}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 22}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 23}
`)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"wild", "foo1"}, "20/minute"},
		{[]string{"wild", "bar"}, "none"},
		{[]string{"noWild", "foo1"}, "none"},
		{[]string{"midWild", "barab"}, "21/minute"},
		{[]string{"midWild", "bar123b"}, "21/minute"},
		{[]string{"midWild", "barb"}, "21/minute"},
		{[]string{"midWild", "bara"}, "none"},
		{[]string{"midWild", "xbarb"}, "none"},
		{[]string{"multiWild", "foo123bar456baz"}, "10/minute"},
		{[]string{"multiWild", "foobarbaz"}, "10/minute"},
		{[]string{"multiWild", "foo123baz"}, "none"},
		{[]string{"multiWild", "bar456baz"}, "none"},
		{[]string{"path", "/api/123/action"}, "22/minute"},
		{[]string{"path", "/api/123/other"}, "none"},
		{[]string{"nestedWild", "val1", "wild", "goo2"}, "23/minute"},
	} {
		if got := lookupRule(c, "test-domain", tc.kv...); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.kv, got, tc.want)
		}
	}
	// share_threshold with wildcards in the middle (the reference's
	// share_threshold.yaml): every matching value shares one state.
	c, err = ParseConfig([]File{{Name: "share.yaml", Data: []byte(`
domain: d
descriptors:
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 50}
`)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(kv ...string) string {
		return c.lookup("d", []*ratelimitv3.RateLimitDescriptor_Entry{{Key: kv[0], Value: kv[1]}}).key
	}
	if a, b := key("midpath", "/api/x/v1"), key("midpath", "/apiv1"); a != b || a == "" || !strings.Contains(a, "/api*v1") {
		t.Errorf("middle wildcard, shared: keys %q and %q", a, b)
	}
	if a, b := key("multiroute", "svc1ep2rpc"), key("multiroute", "svcXepYrpc"); a != b || a == "" {
		t.Errorf("two wildcards, shared: keys %q and %q", a, b)
	}
}

// TestMetadata: a descriptor's metadata block (the reference's
// test/config/metadata.yaml and examples/ratelimit/config/example.yaml)
// loads, any YAML under it, and stays with its rule.
func TestMetadata(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]File{{Name: "metadata.yaml", Data: []byte(`
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: {unit: second, requests_per_unit: 5}
        metadata:
          name: service_1
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
    metadata:
      service_with_quota:
        name: service_2
        weight: 3
        tags: [a, b]
        on: "yes"
        at: 2020-01-01
`)}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := c.lookup("test-domain", []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "key2", Value: "x"}})
	if m.rule == nil || m.rule.metadata == nil {
		t.Fatalf("no metadata: %+v", m.rule)
	}
	got, err := protojson.Marshal(m.rule.metadata)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"service_with_quota": map[string]any{"name": "service_2", "weight": 3.0, "tags": []any{"a", "b"}, "on": "yes", "at": "2020-01-01"}}
	if !reflect.DeepEqual(v, want) {
		t.Errorf("metadata %s, want %v", got, want)
	}
}

// TestSecondDocument: of a file of several YAML documents the first is
// served, as the reference server serves it.
func TestSecondDocument(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig([]File{{Name: "two.yaml", Data: []byte("---\ndomain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n---\ndomain: b\n")}}, ConfigOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "a" {
		t.Errorf("domains %q, want a", got)
	}
}

// TestReferenceFiles: with AllFiles, a directory's files are read as the
// reference server reads them: every file whatever its name
// (ratelimit.conf), in subdirectories too, dot files unless
// IgnoreDotFiles; an empty directory is an empty configuration.
func TestReferenceFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, domain string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("domain: "+domain+"\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := LoadConfig(dir, ConfigOptions{AllFiles: true})
	if err != nil || len(c.Domains()) != 0 {
		t.Fatalf("an empty directory: %v, %v", c, err)
	}
	write("ratelimit.conf", "conf")
	write("sub/extra.yaml", "sub")
	write(".hidden.yaml", "hidden")
	write(".dotdir/x.yaml", "dotdir")
	c, err = LoadConfig(dir, ConfigOptions{AllFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "conf,dotdir,hidden,sub" {
		t.Errorf("domains %q", got)
	}
	c, err = LoadConfig(dir, ConfigOptions{AllFiles: true, IgnoreDotFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Domains(), ","); got != "conf,sub" {
		t.Errorf("ignoring dot files: domains %q", got)
	}
	if _, err := LoadConfig(dir, ConfigOptions{}); err == nil || !strings.Contains(err.Error(), "no *.yaml") {
		t.Errorf("without AllFiles: %v", err)
	}
}
