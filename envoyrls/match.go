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
}

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
	var found *rule
	for i, e := range entries {
		next, value, _ := n.child(e.GetKey(), e.GetValue())
		if next == nil {
			return match{}
		}
		key.WriteByte('|')
		writeKeyPart(&key, e.GetKey())
		key.WriteByte('=')
		writeKeyPart(&key, value)
		if i == len(entries)-1 {
			found = next.rule
		}
		n = next
	}
	if found == nil {
		return match{}
	}
	m := match{rule: found, key: key.String(), metric: found.path}
	if found.detailed {
		m.metric = c.detailedMetric(domain, entries)
	}
	if len(m.key) > maxKey {
		m.key = hashKey(m.key)
	}
	return m
}

// detailedMetric is the metric name of a descriptor whose rule has
// detailed_metric: the request's entries, the values of a shared
// wildcard written as the wildcard.
func (c *Config) detailedMetric(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var metric strings.Builder
	metric.WriteString(domain)
	n := c.domains[domain]
	for _, e := range entries {
		next, _, value := n.child(e.GetKey(), e.GetValue())
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

// child returns the child of n that matches an entry, the value its state
// is kept under (the request's, or the wildcard's pattern when the
// wildcard shares its threshold) and the value its detailed metric names.
func (n *node) child(key, value string) (*node, string, string) {
	if c := n.exact[entry{key, value}]; c != nil {
		return c, value, value
	}
	for i := range n.wildcards {
		w := &n.wildcards[i]
		if w.key == key && w.match(value) {
			if w.share {
				return w.node, w.pattern, w.pattern
			}
			return w.node, value, value
		}
	}
	if c := n.anyValue[key]; c != nil {
		return c, value, value
	}
	return nil, "", ""
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
