package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/redlimit/redlimit/core"
)

// ErrInvalidConfig is wrapped by every error that reports a configuration
// that cannot be loaded: a file that is not YAML, an unknown field, an empty
// domain or key, a unit the format does not have, a domain or a descriptor
// given twice, an extension that cannot be enforced. The message names the
// file and, where it is about one, the descriptor.
var ErrInvalidConfig = errors.New("envoyrls: invalid config")

// File is one configuration file: its name (for errors) and its content.
type File struct {
	Name string
	Data []byte
}

// ConfigOptions says how files are put together into a Config. The zero
// value is the reference server's default.
type ConfigOptions struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors merged (the reference server's MERGE_DOMAIN_CONFIG).
	// false, the default, refuses a domain given in two files.
	MergeDomains bool
}

// Config is a loaded configuration: the rate limits of every domain, in
// the reference server's (envoyproxy/ratelimit) YAML format plus
// redlimit's optional extensions (docs/envoy.md). It is immutable once
// built, so safe for concurrent use; the zero Config has no domains.
type Config struct {
	domains map[string]*node
	rules   int
}

// Domains returns the names of the configured domains, sorted.
func (c *Config) Domains() []string {
	names := make([]string, 0, len(c.domains))
	for d := range c.domains {
		names = append(names, d)
	}
	slices.Sort(names)
	return names
}

// Rules returns how many descriptors of the configuration carry a
// rate_limit block.
func (c *Config) Rules() int { return c.rules }

// node is a descriptor of the configuration: what its children match,
// and its rule when it has a rate_limit block.
type node struct {
	exact     map[entry]*node // key and value given
	anyValue  map[string]*node
	wildcards []wildcard // values ending in '*', in the file's order
	rule      *rule      // nil: no rate_limit block
}

// entry is a descriptor entry: a key and a value.
type entry struct{ key, value string }

// wildcard is a child matched by a key and a value prefix.
type wildcard struct {
	key, prefix string
	share       bool // share_threshold: every matching value shares one state
	node        *node
}

// rule is the rate limit of a descriptor of the configuration.
type rule struct {
	path      string // "domain.key_value.key": where it is in the configuration
	name      string // rate_limit.name, for replaces
	replaces  []string
	unlimited bool
	shadow    bool     // shadow_mode: an OVER_LIMIT answer is OK
	quota     bool     // quota_mode: the same, as the reference server reports it
	detailed  bool     // detailed_metric: metrics name the request's values
	debt      bool     // charge hits in full even past the limit
	unit      timeUnit // the reference format's unit of time, for current_limit
	rate      int      // requests_per_unit; 0 denies every request
	limit     core.Limit
}

// timeUnit is the reference format's unit of time of a limit, or one of
// redlimit's additions on the calendar. A limit of n per unit is a fixed
// window of that length unless its algorithm says otherwise: a month is 30
// days and a year 365, as in the reference server, and with calendar a
// day, week or month follows the calendar in the given zone (a week from
// Monday, a month from the 1st).
type timeUnit string

const (
	unitSecond timeUnit = "second"
	unitMinute timeUnit = "minute"
	unitHour   timeUnit = "hour"
	unitDay    timeUnit = "day"
	unitWeek   timeUnit = "week"
	unitMonth  timeUnit = "month"
	unitYear   timeUnit = "year"
)

// period is the length of a window of the unit, off the calendar.
func (u timeUnit) period() time.Duration {
	switch u {
	case unitSecond:
		return time.Second
	case unitMinute:
		return time.Minute
	case unitHour:
		return time.Hour
	case unitDay:
		return 24 * time.Hour
	case unitWeek:
		return 7 * 24 * time.Hour
	case unitMonth:
		return 30 * 24 * time.Hour
	case unitYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// calendarMonth is the Period core gives a calendar month ("month" in
// core.ParseLimit's grammar).
const calendarMonth = 2_629_746 * time.Second

// The YAML documents. Every field the reference format knows is here, so
// that a file with another field is refused as the reference server
// refuses it (a misspelled "ratelimit" would otherwise mean no limit).
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            *string          `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit *int64         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
	// redlimit's extensions.
	Algorithm string `yaml:"algorithm"`
	Burst     int    `yaml:"burst"`
	Calendar  string `yaml:"calendar"`
	Buckets   int    `yaml:"buckets"`
	Debt      bool   `yaml:"debt"`
}

type yamlReplaces struct {
	Name *string `yaml:"name"`
}

// LoadConfig reads every *.yaml and *.yml file of dir (not of its
// subdirectories, and not files whose name starts with '.') and returns
// their configuration, as ParseConfig does. A directory without such a
// file is an error: an empty configuration would limit nothing.
func LoadConfig(dir string, opts ConfigOptions) (*Config, error) {
	files, err := readDir(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: %s: no *.yaml or *.yml file", ErrInvalidConfig, dir)
	}
	return ParseConfig(files, opts)
}

// readDir returns the configuration files of dir, sorted by name.
func readDir(dir string) ([]File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("envoyrls: config: %w", err)
	}
	var files []File
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
			continue
		}
		path := filepath.Join(dir, name)
		if info, err := os.Stat(path); err != nil || info.IsDir() { // follows symbolic links
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("envoyrls: config: %w", err)
		}
		files = append(files, File{Name: path, Data: data})
	}
	return files, nil
}

// ParseConfig reads configuration files, each a YAML document of one
// domain in the reference server's format, in order, and returns their
// configuration. Errors wrap ErrInvalidConfig and name the file and the
// descriptor that is wrong; nothing is half loaded.
func ParseConfig(files []File, opts ConfigOptions) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		if err := c.load(f, opts); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Config) load(f File, opts ConfigOptions) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, f.Name, fmt.Sprintf(format, args...))
	}
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	dec.KnownFields(true)
	var root yamlRoot
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return fail("empty file: no domain")
		}
		return fail("%s", yamlNames.Replace(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fail("more than one YAML document: one domain a file")
	}
	if root.Domain == "" {
		return fail("empty domain")
	}
	d, ok := c.domains[root.Domain]
	switch {
	case ok && !opts.MergeDomains:
		return fail("domain %q is configured in another file too (merging is off)", root.Domain)
	case !ok:
		d = &node{}
	}
	// Work on a copy, so that a file refused half way changes nothing.
	d = d.clone()
	n, err := d.loadDescriptors(root.Domain, root.Descriptors)
	if err != nil {
		return fail("%v", err)
	}
	c.domains[root.Domain] = d
	c.rules += n
	return nil
}

// yamlNames rewrites the YAML decoder's errors in the format's words.
var yamlNames = strings.NewReplacer(
	"unmarshal errors:\n  ", "",
	"\n  ", "; ",
	" in type envoyrls.yamlRoot", " (a file has domain and descriptors)",
	" in type envoyrls.yamlDescriptor", " in a descriptor",
	" in type envoyrls.yamlRateLimit", " in a rate_limit block",
	" in type envoyrls.yamlReplaces", " in replaces",
	"into envoyrls.yamlDescriptor", "into a descriptor",
	"into envoyrls.yamlRoot", "into a file",
	"into envoyrls.yamlRateLimit", "into a rate_limit block",
	"into envoyrls.yamlReplaces", "into replaces",
)

// clone returns a deep copy of the node's maps (the rules are immutable).
func (n *node) clone() *node {
	m := &node{rule: n.rule, wildcards: slices.Clone(n.wildcards)}
	if n.exact != nil {
		m.exact = make(map[entry]*node, len(n.exact))
		for k, v := range n.exact {
			m.exact[k] = v.clone()
		}
	}
	if n.anyValue != nil {
		m.anyValue = make(map[string]*node, len(n.anyValue))
		for k, v := range n.anyValue {
			m.anyValue[k] = v.clone()
		}
	}
	for i, w := range m.wildcards {
		m.wildcards[i].node = w.node.clone()
	}
	return m
}

// loadDescriptors adds descriptors under n, whose path is parent, and
// returns how many rules they hold.
func (n *node) loadDescriptors(parent string, descriptors []yamlDescriptor) (int, error) {
	rules := 0
	for _, y := range descriptors {
		if y.Key == nil || *y.Key == "" {
			if y.Value != "" {
				return 0, fmt.Errorf("descriptor %s.?_%s: empty key", parent, y.Value)
			}
			return 0, fmt.Errorf("descriptor under %s: empty key", parent)
		}
		key := *y.Key
		path := parent + "." + key
		if y.Value != "" {
			path += "_" + y.Value
		}
		child := &node{}
		prefix, isWildcard := strings.CutSuffix(y.Value, "*")
		switch {
		case y.ShareThreshold && !isWildcard:
			return 0, fmt.Errorf("descriptor %s: share_threshold needs a wildcard value (ending in '*')", path)
		case isWildcard:
			if slices.ContainsFunc(n.wildcards, func(w wildcard) bool { return w.key == key && w.prefix == prefix }) {
				return 0, fmt.Errorf("descriptor %s is given twice", path)
			}
			n.wildcards = append(n.wildcards, wildcard{key: key, prefix: prefix, share: y.ShareThreshold, node: child})
		case y.Value != "":
			if n.exact == nil {
				n.exact = map[entry]*node{}
			}
			if _, dup := n.exact[entry{key, y.Value}]; dup {
				return 0, fmt.Errorf("descriptor %s is given twice", path)
			}
			n.exact[entry{key, y.Value}] = child
		default:
			if n.anyValue == nil {
				n.anyValue = map[string]*node{}
			}
			if _, dup := n.anyValue[key]; dup {
				return 0, fmt.Errorf("descriptor %s is given twice", path)
			}
			n.anyValue[key] = child
		}
		if y.RateLimit != nil {
			r, err := newRule(path, y)
			if err != nil {
				return 0, fmt.Errorf("descriptor %s: %w", path, err)
			}
			child.rule = r
			rules++
		}
		m, err := child.loadDescriptors(path, y.Descriptors)
		if err != nil {
			return 0, err
		}
		rules += m
	}
	return rules, nil
}

// newRule checks the rate_limit block of y, at path.
func newRule(path string, y yamlDescriptor) (*rule, error) {
	b := y.RateLimit
	r := &rule{path: path, name: b.Name, shadow: y.ShadowMode, quota: y.QuotaMode, detailed: y.DetailedMetric, debt: b.Debt}
	for _, rep := range b.Replaces {
		if rep.Name == nil || *rep.Name == "" {
			return nil, errors.New("replaces has an entry without a name")
		}
		if *rep.Name == b.Name {
			return nil, fmt.Errorf("replaces its own name %q", b.Name)
		}
		r.replaces = append(r.replaces, *rep.Name)
	}
	unit := timeUnit(strings.ToLower(b.Unit))
	valid := unit.period() > 0
	if b.Unlimited {
		if valid {
			return nil, errors.New("unlimited with a unit: give one or the other")
		}
		if b.Algorithm != "" || b.Burst != 0 || b.Calendar != "" || b.Buckets != 0 || b.Debt {
			return nil, errors.New("unlimited with algorithm, burst, calendar, buckets or debt")
		}
		r.unlimited = true
		return r, nil
	}
	if !valid {
		return nil, fmt.Errorf("invalid unit %q (second, minute, hour, day, week, month or year)", b.Unit)
	}
	r.unit = unit
	if b.RequestsPerUnit == nil {
		return nil, errors.New("rate_limit without requests_per_unit")
	}
	rpu := *b.RequestsPerUnit
	if rpu < 0 || rpu > 1<<32-1 {
		return nil, fmt.Errorf("requests_per_unit %d is not a uint32", rpu)
	}
	r.rate = int(rpu)
	limit, err := limitOf(r.rate, unit, b.Algorithm, b.Burst, b.Buckets, b.Calendar)
	if err != nil {
		return nil, err
	}
	r.limit = limit
	return r, nil
}

// limitOf returns the core.Limit of rate per unit with the extensions;
// a rate of 0 (deny every request) is returned as the limit of rate 1,
// which the caller never sends.
func limitOf(rate int, unit timeUnit, algorithm string, burst, buckets int, calendar string) (core.Limit, error) {
	l := core.Limit{Algorithm: core.FixedWindow, Rate: max(rate, 1), Period: unit.period(), Burst: burst, Buckets: buckets}
	if algorithm != "" {
		l.Algorithm = core.Algorithm(algorithm)
	}
	if l.Algorithm == core.Concurrency {
		return core.Limit{}, errors.New("algorithm concurrency is not served: Envoy's rate limit API has no call that ends a request")
	}
	if calendar != "" {
		if l.Algorithm != core.FixedWindow {
			return core.Limit{}, fmt.Errorf("calendar needs algorithm fixed_window, not %s", l.Algorithm)
		}
		switch unit {
		case unitDay, unitWeek:
		case unitMonth:
			l.Period = calendarMonth
		default:
			return core.Limit{}, fmt.Errorf("calendar needs unit day, week or month, not %s", unit)
		}
		l.Calendar = calendar
	}
	if rate == 0 && l.Burst != 0 {
		l.Burst = 0
	}
	if err := l.Validate(); err != nil {
		return core.Limit{}, err
	}
	return l, nil
}
