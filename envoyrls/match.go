package envoyrls

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// match is what the configuration says of one descriptor of a request.
type match struct {
	rule   *rule  // nil: no rate limit applies
	key    string // the state's key in redlimit's engine
	metric string // the policy label of its metrics
	// metadata: the rule's metadata block is reported when the
	// descriptor passes. As in the reference server, it is not when
	// detailed_metric or value_to_metric name the metric after the
	// request's values.
	metadata bool
}

// matchKind says how a descriptor entry matched a child of the
// configuration.
type matchKind uint8

const (
	byValue    matchKind = iota + 1 // its key and value
	byWildcard                      // its key and a wildcard value
	byShared                        // its key and a wildcard value with share_threshold
	byKey                           // its key alone
)

// lookup finds the rule of a request's descriptor in domain, walking the
// configuration one entry at a time as the reference server does: at each
// level the most specific match wins (key and value, then a wildcard
// value in the file's order, then the key alone), and a rule applies only
// at the level of the descriptor's last entry. It returns the zero match
// when no rule applies or the domain is unknown.
func (c *Config) lookup(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) match {
	n := c.domains[domain]
	if n == nil || len(entries) == 0 {
		return match{}
	}
	var key strings.Builder
	writeKeyPart(&key, domain)
	valueToMetric := false
	for _, e := range entries {
		next, how, pattern := n.child(e.GetKey(), e.GetValue())
		if next == nil {
			return match{}
		}
		valueToMetric = valueToMetric || next.valueToMetric
		key.WriteByte('|')
		writeKeyPart(&key, e.GetKey())
		key.WriteByte('=')
		if how == byShared {
			writeKeyPart(&key, pattern)
		} else {
			writeKeyPart(&key, e.GetValue())
		}
		n = next
	}
	found := n.rule
	if found == nil {
		return match{}
	}
	m := match{rule: found, key: key.String(), metric: found.path, metadata: found.metadata != nil}
	switch {
	case found.detailed:
		m.metric, m.metadata = c.metricOf(domain, entries, true), false
	case valueToMetric:
		if metric := c.metricOf(domain, entries, false); metric != found.path {
			m.metric, m.metadata = metric, false
		}
	}
	if len(m.key) > maxKey {
		m.key = hashKey(m.key)
	}
	return m
}

// metricOf is the metric name of a descriptor whose rule names its
// metric after the request's values, as the reference server names its
// statistics: with detailed, every entry's value (a shared wildcard's
// pattern for its entries); else, for value_to_metric, the value at the
// levels that say so, the configuration's value (or wildcard pattern)
// at the others.
func (c *Config) metricOf(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry, detailed bool) string {
	var metric strings.Builder
	metric.WriteString(domain)
	n := c.domains[domain]
	for _, e := range entries {
		next, how, pattern := n.child(e.GetKey(), e.GetValue())
		value := e.GetValue()
		switch {
		case how == byShared:
			value = pattern
		case detailed, how == byValue:
		case how == byWildcard && !next.valueToMetric:
			value = pattern
		case how == byKey && !next.valueToMetric:
			value = ""
		}
		metric.WriteByte('.')
		metric.WriteString(e.GetKey())
		if value != "" {
			metric.WriteByte('_')
			metric.WriteString(value)
		}
		n = next
	}
	return metric.String()
}

// hashKey returns the key for a descriptor too long to be its own.
func hashKey(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// keyOf returns the engine key and metric name of a descriptor no rule
// matched (a request's limit override).
func keyOf(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) (string, string) {
	var key, metric strings.Builder
	writeKeyPart(&key, domain)
	metric.WriteString(domain)
	for _, e := range entries {
		key.WriteByte('|')
		writeKeyPart(&key, e.GetKey())
		key.WriteByte('=')
		writeKeyPart(&key, e.GetValue())
		metric.WriteByte('.')
		metric.WriteString(e.GetKey())
		if e.GetValue() != "" {
			metric.WriteByte('_')
			metric.WriteString(e.GetValue())
		}
	}
	k := key.String()
	if len(k) > maxKey {
		k = hashKey(k)
	}
	return k, metric.String()
}

// maxKey is the longest key sent to the engine as it is; longer ones are
// hashed (the engine takes at most 1024 bytes).
const maxKey = 512

// child returns the child of n that matches an entry, how it matched,
// and the wildcard's pattern when it matched one.
func (n *node) child(key, value string) (*node, matchKind, string) {
	if c := n.exact[entry{key, value}]; c != nil {
		return c, byValue, ""
	}
	for i := range n.wildcards {
		w := &n.wildcards[i]
		if w.key == key && w.match(value) {
			if w.share {
				return w.node, byShared, w.pattern
			}
			return w.node, byWildcard, w.pattern
		}
	}
	if c := n.anyValue[key]; c != nil {
		return c, byKey, ""
	}
	return nil, 0, ""
}

// writeKeyPart writes s with '%', '|' and '=' as %XX, so that no two
// descriptors write the same key.
func writeKeyPart(b *strings.Builder, s string) {
	if !strings.ContainsAny(s, "%|=") {
		b.WriteString(s)
		return
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case '|':
			b.WriteString("%7C")
		case '=':
			b.WriteString("%3D")
		default:
			b.WriteByte(c)
		}
	}
}
