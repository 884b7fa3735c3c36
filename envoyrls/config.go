package envoyrls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

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
	// AllFiles makes LoadConfig read a directory as the reference server
	// reads its RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY:
	// every regular file under it, whatever its name (ratelimit.conf as
	// well as *.yaml), in its subdirectories too (a symbolic link to a
	// file is followed, one to a directory is not), dot files included
	// unless IgnoreDotFiles; an empty directory is an empty
	// configuration. false, the default, reads the *.yaml and *.yml
	// files of the directory itself, not dot files, and refuses a
	// directory without one.
	AllFiles bool
	// IgnoreDotFiles, with AllFiles, skips the files and directories
	// whose name starts with '.' (the reference server's
	// RUNTIME_IGNOREDOTFILES), such as the ..data links and the
	// timestamped directories of a Kubernetes ConfigMap volume. false by
	// default, as in the reference.
	IgnoreDotFiles bool
}

// Config is a loaded configuration: the rate limits of every domain, in
// the reference server's (envoyproxy/ratelimit) YAML format plus
// redlimit's optional extensions (docs/envoy.md). It is immutable once
// built, so safe for concurrent use; the zero Config has no domains.
type Config struct {
	domains map[string]*node
	rules   int
	version uint64 // LoadConfig's: the files' fingerprint before it read them
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
	wildcards []wildcard // values with a '*', in the file's order
	rule      *rule      // nil: no rate_limit block
	// valueToMetric: the metric name carries the request's value at
	// this level (value_to_metric).
	valueToMetric bool
}

// entry is a descriptor entry: a key and a value.
type entry struct{ key, value string }

// wildcard is a child matched by a key and a value pattern: each '*' in
// it matches zero or more bytes.
type wildcard struct {
	key, pattern string
	parts        []string // pattern split at each '*'
	share        bool     // share_threshold: every matching value shares one state
	node         *node
}

// match reports whether value matches the pattern w.parts was split
// from, as the reference server matches it: it starts with the first
// part, ends with the last, and holds the ones between in order, none
// of them overlapping.
func (w *wildcard) match(value string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
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
	// metadata is the descriptor's metadata block, reported in the
	// answer's dynamic metadata when the descriptor passes; nil for none.
	metadata *structpb.Struct
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
	Metadata       yaml.Node        `yaml:"metadata"` // any YAML
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

// LoadConfig reads the configuration files of dir and returns their
// configuration, as ParseConfig does: the *.yaml and *.yml files of dir
// itself (not dot files), or with opts.AllFiles every file under dir as
// the reference server reads them. Without AllFiles, a directory without
// such a file is an error: an empty configuration would limit nothing.
func LoadConfig(dir string, opts ConfigOptions) (*Config, error) {
	version, _ := fingerprint(dir, opts)
	paths, err := configFiles(dir, opts)
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 && !opts.AllFiles {
		return nil, fmt.Errorf("%w: %s: no *.yaml or *.yml file", ErrInvalidConfig, dir)
	}
	files := make([]File, 0, len(paths))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("envoyrls: config: %w", err)
		}
		files = append(files, File{Name: path, Data: data})
	}
	c, err := ParseConfig(files, opts)
	if c != nil {
		c.version = version
	}
	return c, err
}

// configFiles returns the paths of the configuration files of dir that
// LoadConfig reads, in the order it reads them: the *.yaml and *.yml
// files of dir itself, not dot files, sorted by name; with opts.AllFiles,
// every regular file under dir, as the reference server's loader
// (goruntime) finds them, in lexical order: it descends into
// directories but not into symbolic links to directories, follows
// symbolic links to files, and skips names starting with '.' when
// opts.IgnoreDotFiles. dir itself may be a symbolic link.
func configFiles(dir string, opts ConfigOptions) ([]string, error) {
	var paths []string
	add := func(path string) {
		if info, err := os.Stat(path); err == nil && info.Mode().IsRegular() { // follows symbolic links
			paths = append(paths, path)
		}
	}
	if !opts.AllFiles {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("envoyrls: config: %w", err)
		}
		for _, e := range entries {
			if name := e.Name(); !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
				add(filepath.Join(dir, name))
			}
		}
		return paths, nil
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("envoyrls: config: %w", err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case path == root:
		case opts.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") && d.IsDir():
			return filepath.SkipDir
		case opts.IgnoreDotFiles && strings.HasPrefix(d.Name(), "."), d.IsDir():
		default:
			add(filepath.Join(dir, strings.TrimPrefix(path, root)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("envoyrls: config: %w", err)
	}
	return paths, nil
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
	// More documents in the file are not read: the reference server
	// serves the first.
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
	m := &node{rule: n.rule, wildcards: slices.Clone(n.wildcards), valueToMetric: n.valueToMetric}
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
		child := &node{valueToMetric: y.ValueToMetric}
		isWildcard := strings.Contains(y.Value, "*")
		switch {
		case y.ShareThreshold && !isWildcard:
			return 0, fmt.Errorf("descriptor %s: share_threshold needs a wildcard value (with a '*')", path)
		case isWildcard:
			if slices.ContainsFunc(n.wildcards, func(w wildcard) bool { return w.key == key && w.pattern == y.Value }) {
				return 0, fmt.Errorf("descriptor %s is given twice", path)
			}
			n.wildcards = append(n.wildcards, wildcard{key: key, pattern: y.Value, parts: strings.Split(y.Value, "*"), share: y.ShareThreshold, node: child})
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
	md, err := metadataOf(&y.Metadata)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	r.metadata = md
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

// metadataOf returns a descriptor's metadata block as the protobuf
// Struct the answer's dynamic metadata carries, nil when there is none.
// Scalars are read as the reference server's YAML reader reads them into
// its map: integers and floats as numbers, true and false as booleans,
// null as null, anything else (yes, dates) as its text.
func metadataOf(n *yaml.Node) (*structpb.Struct, error) {
	if n.Kind == 0 {
		return nil, nil
	}
	v, err := yamlValue(n)
	if err != nil {
		return nil, err
	}
	if v.GetStructValue() == nil {
		if _, null := v.GetKind().(*structpb.Value_NullValue); null {
			return nil, nil
		}
		return nil, fmt.Errorf("line %d: a mapping, not %s", n.Line, n.ShortTag())
	}
	if len(v.GetStructValue().GetFields()) == 0 {
		return nil, nil
	}
	return v.GetStructValue(), nil
}

// yamlValue converts a YAML node to a protobuf Value.
func yamlValue(n *yaml.Node) (*structpb.Value, error) {
	switch n.Kind {
	case yaml.DocumentNode:
		return yamlValue(n.Content[0])
	case yaml.AliasNode:
		return yamlValue(n.Alias)
	case yaml.MappingNode:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(n.Content)/2)}
		for i := 0; i+1 < len(n.Content); i += 2 {
			v, err := yamlValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			s.Fields[n.Content[i].Value] = v
		}
		return structpb.NewStructValue(s), nil
	case yaml.SequenceNode:
		l := &structpb.ListValue{Values: make([]*structpb.Value, 0, len(n.Content))}
		for _, c := range n.Content {
			v, err := yamlValue(c)
			if err != nil {
				return nil, err
			}
			l.Values = append(l.Values, v)
		}
		return structpb.NewListValue(l), nil
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		var f float64
		if err := n.Decode(&f); err == nil {
			return structpb.NewNumberValue(f), nil
		}
	case "!!bool":
		if n.Value == "true" || n.Value == "false" {
			return structpb.NewBoolValue(n.Value == "true"), nil
		}
	case "!!null":
		return structpb.NewNullValue(), nil
	}
	return structpb.NewStringValue(n.Value), nil
}

// String writes the configuration's rules, one a line, as the reference
// server's /rlconfig writes them: where each is in the configuration,
// its unit and requests_per_unit, its shadow_mode and quota_mode; sorted.
func (c *Config) String() string {
	var lines []string
	var walk func(n *node)
	walk = func(n *node) {
		if r := n.rule; r != nil {
			unit := strings.ToUpper(string(r.unit))
			if r.unlimited {
				unit = "UNKNOWN"
			}
			lines = append(lines, fmt.Sprintf("%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n", r.path, unit, r.rate, r.shadow, r.quota))
		}
		for _, m := range n.exact {
			walk(m)
		}
		for _, m := range n.anyValue {
			walk(m)
		}
		for _, w := range n.wildcards {
			walk(w.node)
		}
	}
	for _, d := range c.domains {
		walk(d)
	}
	slices.Sort(lines)
	return strings.Join(lines, "")
}
