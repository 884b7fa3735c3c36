package envoyrls

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
