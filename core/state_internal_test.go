package core

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keyTuple is what names a state key: (prefix, scope, key, limit), the
// limit standing for its variant and period.
type keyTuple struct {
	prefix, scope, key string
	limit              int
}

// stateKeyLimits are limits of distinct variants or periods.
var stateKeyLimits = []Limit{
	Limit{Rate: 1, Period: time.Minute},
	{Algorithm: TokenBucket, Stepped: true, Rate: 1, Period: 10 * time.Second},
	{Algorithm: FixedWindow, Rate: 1, Period: time.Hour},
	{Algorithm: FixedWindow, Rate: 1, Period: 24 * time.Hour, Calendar: "UTC"},
}

func stateKeyInfos(t *testing.T) []*limitInfo {
	t.Helper()
	out := make([]*limitInfo, len(stateKeyLimits))
	for i, l := range stateKeyLimits {
		info, err := workOut(l)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = info
	}
	return out
}

func nameOf(infos []*limitInfo, k keyTuple) string {
	return stateKey(escapePrefix(k.prefix), k.scope, k.key, infos[k.limit])
}

// unescape inverts escape, refusing what escape cannot write: a '%' not
// followed by two upper-case hex digits, or a byte of special unescaped.
func unescape(s, special string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(special, c) >= 0 {
			return "", false
		}
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil || strings.ToUpper(s[i+1:i+3]) != s[i+1:i+3] {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 2
	}
	return b.String(), true
}

// hashTag is the part of name Redis Cluster hashes: between the first '{'
// and the first '}' after it, if not empty; else the whole name.
func hashTag(name string) string {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return name
	}
	j := strings.IndexByte(name[i+1:], '}')
	if j <= 0 {
		return name
	}
	return name[i+1 : i+1+j]
}

// decodeStateKey reads a name back as the comment on the layout (state.go)
// says it can be: the proof of injectivity, run. ok is false if name is
// not one stateKey can write.
func decodeStateKey(infos []*limitInfo, name string) (k keyTuple, ok bool) {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return k, false
	}
	j := strings.IndexByte(name[i+1:], '}')
	if j < 0 {
		return k, false
	}
	head, tag, state := name[:i], name[i+1:i+1+j], name[i+1+j+1:]
	if k.key, ok = unescape(tag, "}"); !ok || k.key == "" {
		return k, false
	}
	k.limit = -1
	for n, info := range infos {
		if info.state == state {
			k.limit = n
		}
	}
	if k.limit < 0 {
		return k, false
	}
	var p, colon string
	switch parts := strings.Split(head, ":"); len(parts) - 1 {
	case 0: // <p>
		p = parts[0]
	case 1: // <p>:
		p, colon = parts[0], ":"
		ok = parts[1] == ""
	case 2: // <p>:<scope>:
		p, colon, k.scope = parts[0], ":", parts[1]
		ok = parts[2] == "" && k.scope != ""
	case 3: // <p>::<scope>:
		p, k.scope = parts[0], parts[2]
		ok = parts[1] == "" && parts[3] == "" && k.scope != ""
	default:
		return k, false
	}
	if !ok {
		return k, false
	}
	if k.scope, ok = unescape(k.scope, "{}:"); !ok {
		return k, false
	}
	if p, ok = unescape(p, "{}:"); !ok {
		return k, false
	}
	k.prefix = p + colon
	return k, true
}

// TestStateKeyNames: the names of the common case, and pairs that once
// shared a name (issue 24): distinct prefixes and scopes, each tuple read
// back from its name.
func TestStateKeyNames(t *testing.T) {
	t.Parallel()
	infos := stateKeyInfos(t)
	for _, c := range []struct {
		k    keyTuple
		want string
	}{
		{keyTuple{"redlimit:", "", "ip:203.0.113.7", 0}, "redlimit:{ip:203.0.113.7}:gcra:1m"},
		{keyTuple{"redlimit:", "login", "ip:203.0.113.7", 0}, "redlimit:login:{ip:203.0.113.7}:gcra:1m"},
		{keyTuple{"redlimit:", "10/s, 1000/h fixed_window", "ip:2001:db8::/64", 2}, "redlimit:10/s, 1000/h fixed_window:{ip:2001:db8::/64}:fixed_window:1h"},
		{keyTuple{"redlimit:", "POST /login {x}", "a}b{c", 1}, "redlimit:POST /login %7Bx%7D:{a%7Db{c}:token_bucket:stepped:10s"},
		{keyTuple{"", "", "user:42", 3}, "{user:42}:fixed_window:calendar:UTC:1d"},
		{keyTuple{"", "api", "user:42", 0}, "::api:{user:42}:gcra:1m"},
		{keyTuple{"rl", "api", "user:42", 0}, "rl::api:{user:42}:gcra:1m"},
		{keyTuple{"redlimit:pod-7:", "", "user:42", 0}, "redlimit%3Apod-7:{user:42}:gcra:1m"},
		{keyTuple{"P{", "", "k", 0}, "P%7B{k}:gcra:1m"},
		{keyTuple{"P%7B", "", "k", 0}, "P%257B{k}:gcra:1m"},
		{keyTuple{"P:", "login", "k", 0}, "P:login:{k}:gcra:1m"},
		{keyTuple{"P:login:", "", "k", 0}, "P%3Alogin:{k}:gcra:1m"},
		{keyTuple{"P:", "a:b", "k", 0}, "P:a%3Ab:{k}:gcra:1m"},
		{keyTuple{"P:a:", "b", "k", 0}, "P%3Aa:b:{k}:gcra:1m"},
		{keyTuple{"app", "login", "k", 0}, "app::login:{k}:gcra:1m"},
		{keyTuple{"appl", "ogin", "k", 0}, "appl::ogin:{k}:gcra:1m"},
		{keyTuple{"app:", "login", "k", 0}, "app:login:{k}:gcra:1m"},
		{keyTuple{"login:", "", "k", 0}, "login:{k}:gcra:1m"},
		{keyTuple{"", "login", "k", 0}, "::login:{k}:gcra:1m"},
		{keyTuple{":", "login", "k", 0}, ":login:{k}:gcra:1m"},
		{keyTuple{"::", "", "k", 0}, "%3A:{k}:gcra:1m"},
		{keyTuple{"%", "%", "%}", 0}, "%25::%25:{%25%7D}:gcra:1m"},
	} {
		name := nameOf(infos, c.k)
		if name != c.want {
			t.Errorf("%+v: %q, want %q", c.k, name, c.want)
		}
		if back, ok := decodeStateKey(infos, name); !ok || back != c.k {
			t.Errorf("%q reads back as %+v (%v), want %+v", name, back, ok, c.k)
		}
	}
}

// stateKeyWords are the pieces the names of TestStateKeyInjective are made
// of: every byte the layout escapes or splits at, and escapes already
// written.
var stateKeyWords = []string{"P", ":", "{", "}", "%", "7B", "login", "", "%3A", "%25"}

// words returns every string of at most n of stateKeyWords, once each.
func words(n int) []string {
	seen := map[string]bool{"": true}
	out, last := []string{""}, []string{""}
	for range n {
		var next []string
		for _, s := range last {
			for _, w := range stateKeyWords {
				if !seen[s+w] {
					seen[s+w] = true
					next = append(next, s+w)
				}
			}
		}
		out, last = append(out, next...), next
	}
	return out
}

func randomWord(r *rand.Rand, n int) string {
	var b strings.Builder
	for range r.IntN(n + 1) {
		b.WriteString(stateKeyWords[r.IntN(len(stateKeyWords))])
	}
	return b.String()
}

// TestStateKeyInjective: distinct (prefix, scope, key, variant, period)
// never share a name (every name reads back as the tuple that wrote it),
// and a name's hash tag is exactly its escaped key: over every prefix,
// scope and key of up to two of stateKeyWords, and random ones of up to
// six.
func TestStateKeyInjective(t *testing.T) {
	t.Parallel()
	infos := stateKeyInfos(t)
	seen := make(map[string]keyTuple)
	try := func(k keyTuple) {
		name := nameOf(infos, k)
		if other, ok := seen[name]; ok && other != k {
			t.Fatalf("%+v and %+v share the name %q", k, other, name)
		}
		seen[name] = k
		if back, ok := decodeStateKey(infos, name); !ok || back != k {
			t.Fatalf("%q, the name of %+v, reads back as %+v (%v)", name, k, back, ok)
		}
		if tag := hashTag(name); tag != escape(k.key, "}") || strings.Contains(tag, "}") {
			t.Fatalf("%q, the name of %+v, has the hash tag %q; want the key's %q", name, k, tag, escape(k.key, "}"))
		}
	}
	all := words(2)
	for _, prefix := range all {
		for _, scope := range all {
			for _, key := range all[1:] { // not "": an empty key is an error
				for limit := range infos {
					try(keyTuple{prefix, scope, key, limit})
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 24))
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	for range n {
		k := keyTuple{randomWord(r, 6), randomWord(r, 6), randomWord(r, 6), r.IntN(len(infos))}
		if k.key != "" {
			try(k)
		}
	}
}

// BenchmarkStateKey: a name in the common case allocates once (the name),
// with a scope as without; each part escaped adds one.
func BenchmarkStateKey(b *testing.B) {
	info, err := workOut(Limit{Rate: 1, Period: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	prefix := escapePrefix("redlimit:")
	for _, c := range []struct{ name, scope, key string }{
		{"plain", "", "ip:203.0.113.7"},
		{"scope", "login", "ip:203.0.113.7"},
		{"escaped", "POST /login {x}", "a}b"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = stateKey(prefix, c.scope, c.key, info)
			}
		})
	}
}

// TestLimitCache: a limit is worked out once and then read from the
// cache (the same *limitInfo), from any number of goroutines at once; an
// invalid limit is an error and is not kept; past maxCachedLimits a limit
// is worked out per call, correctly, and the cache stays bounded.
func TestLimitCache(t *testing.T) {
	t.Parallel()
	var c limitCache
	if _, err := c.get(Limit{Rate: 0, Period: time.Second}); err == nil {
		t.Fatal("an invalid limit was worked out")
	}
	if n := len(c.m); n != 0 {
		t.Fatalf("%d limits kept after an invalid one, want 0", n)
	}
	first, err := c.get(PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *limitInfo)
	for range 8 {
		go func() {
			info, err := c.get(PerSecond(1))
			if err != nil {
				t.Error(err)
			}
			for i := range 50 { // others meanwhile
				_, _ = c.get(Limit{Rate: 1 + i, Period: time.Minute})
			}
			done <- info
		}()
	}
	for range 8 {
		if info := <-done; info != first {
			t.Errorf("a cached limit was worked out again: %p, want %p", info, first)
		}
	}
	for i := range maxCachedLimits + 10 {
		l := Limit{Rate: 1 + i, Period: time.Hour}
		info, err := c.get(l)
		if err != nil {
			t.Fatal(err)
		}
		if info.capacity != l.Capacity() || info.state != ":gcra:1h" {
			t.Fatalf("%v worked out as capacity %d, state %q", l, info.capacity, info.state)
		}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if n := len(c.m); n != maxCachedLimits {
		t.Errorf("%d limits kept, want at most %d", n, maxCachedLimits)
	}
}
