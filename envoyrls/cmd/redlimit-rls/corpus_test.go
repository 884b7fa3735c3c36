package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The reference server's corpus: its test/config files, the requests of
// its integration tests and scripts, its service tests and its README's
// examples, written down in ../../testdata/corpus (README.md there says
// how) with the answers the reference gives, each case citing where it
// comes from. TestCorpus runs every case against redlimit-rls in both
// modes.

var updateGolden = flag.Bool("update", false, "rewrite testdata/corpus/default-mode.golden")

// corpusDir is where the corpus lives.
const corpusDir = "../../testdata/corpus"

// corpusT0 is the clock at the start of each block: 12:00:05 UTC, so
// that a minute's window has 55 s left, an hour's 3595 s, a day's 43195 s.
var corpusT0 = time.Date(2026, 3, 10, 12, 0, 5, 0, time.UTC)

// corpusBlock is a configuration, its settings and the cases asked of it
// in order (the state they leave counts).
type corpusBlock struct {
	file, config string
	env          []string
	steps        []corpusStep
}

// corpusStep is a case (a request and the reference's answer), or a
// move of the clock.
type corpusStep struct {
	id     string // file:line, #repetition
	source string
	at     string // a move of the clock: "+2s" or "12:01:00"
	req    *rlsv3.RateLimitRequest
	want   string // the answer, as answerString writes it
}

// loadCorpus reads every *.txt file of the corpus.
func loadCorpus(t *testing.T) []corpusBlock {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpusDir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus in %s: %v", corpusDir, err)
	}
	var blocks []corpusBlock
	for _, f := range files {
		b, err := parseCorpusFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, b...)
	}
	return blocks
}

// parseCorpusFile reads one file of the corpus: lines of "source:
// TEXT", "config: DIR [NAME=VALUE...]", "at: +DURATION|HH:MM:SS" and
// "[N*]REQUEST => ANSWER"; '#' starts a comment line.
func parseCorpusFile(path string) ([]corpusBlock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var blocks []corpusBlock
	source := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		where := fmt.Sprintf("%s:%d", filepath.Base(path), n)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.Contains(k, " ") && !strings.Contains(line, "=>") {
			v = strings.TrimSpace(v)
			switch k {
			case "source":
				source = v
			case "config":
				fields := strings.Fields(v)
				blocks = append(blocks, corpusBlock{file: where, config: fields[0], env: fields[1:]})
			case "at":
				if len(blocks) == 0 {
					return nil, fmt.Errorf("%s: at before config", where)
				}
				blocks[len(blocks)-1].steps = append(blocks[len(blocks)-1].steps, corpusStep{id: where, at: v})
			default:
				return nil, fmt.Errorf("%s: unknown line %q", where, k)
			}
			continue
		}
		if len(blocks) == 0 {
			return nil, fmt.Errorf("%s: a case before config", where)
		}
		steps, err := parseCase(where, source, line)
		if err != nil {
			return nil, err
		}
		blocks[len(blocks)-1].steps = append(blocks[len(blocks)-1].steps, steps...)
	}
	return blocks, sc.Err()
}

// parseCase reads "[N*]DOMAIN [hits=N] (k=v,...)[#hits=N][#limit=N/UNIT]... => ANSWER"
// into N steps; "rem=A..B" in the answer counts from A to B, one a step.
func parseCase(where, source, line string) ([]corpusStep, error) {
	left, right, _ := strings.Cut(line, "=>")
	left, right = strings.TrimSpace(left), strings.TrimSpace(right)
	times := 1
	if n, rest, ok := strings.Cut(left, "*"); ok && !strings.ContainsAny(n, " (") {
		var err error
		if times, err = strconv.Atoi(n); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		left = strings.TrimSpace(rest)
	}
	req, err := parseRequest(left)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", where, err)
	}
	var steps []corpusStep
	for i := range times {
		want, err := expandAnswer(right, i, times)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
		id := where
		if times > 1 {
			id += fmt.Sprintf("#%d", i+1)
		}
		steps = append(steps, corpusStep{id: id, source: source, req: req, want: want})
	}
	return steps, nil
}

// parseRequest reads a request: its domain ("" for none), the request's
// hits_addend, and each descriptor with its own hits_addend and limit.
func parseRequest(s string) (*rlsv3.RateLimitRequest, error) {
	domain, rest, _ := strings.Cut(s, " ")
	req := &rlsv3.RateLimitRequest{Domain: strings.Trim(domain, `"`)}
	rest = strings.TrimSpace(rest)
	if h, r, ok := strings.Cut(rest, " "); strings.HasPrefix(rest, "hits=") {
		n, err := strconv.ParseUint(strings.TrimPrefix(h, "hits="), 10, 32)
		if err != nil {
			return nil, err
		}
		req.HitsAddend, rest = uint32(n), r
		if !ok {
			rest = ""
		}
	}
	for rest = strings.TrimSpace(rest); rest != ""; rest = strings.TrimSpace(rest) {
		end := strings.IndexByte(rest, ')')
		if rest[0] != '(' || end < 0 {
			return nil, fmt.Errorf("a descriptor is (key=value,...): %q", rest)
		}
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, kv := range strings.Split(rest[1:end], ",") {
			if kv == "" { // () is a descriptor of no entries
				continue
			}
			k, v, _ := strings.Cut(kv, "=")
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		opts, next, _ := strings.Cut(rest[end+1:], " ")
		if err := descriptorOptions(d, opts); err != nil {
			return nil, err
		}
		req.Descriptors = append(req.Descriptors, d)
		rest = next
	}
	return req, nil
}

// descriptorOptions reads "#hits=N#limit=N/UNIT" after a descriptor.
func descriptorOptions(d *ratelimitv3.RateLimitDescriptor, opts string) error {
	for _, o := range strings.Split(opts, "#")[1:] {
		k, v, _ := strings.Cut(o, "=")
		switch k {
		case "hits":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return err
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		case "limit":
			rpu, unit, _ := strings.Cut(v, "/")
			n, err := strconv.ParseUint(rpu, 10, 32)
			if err != nil {
				return err
			}
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n), Unit: typev3.RateLimitUnit(typev3.RateLimitUnit_value[unit])}
		default:
			return fmt.Errorf("descriptor option %q", o)
		}
	}
	return nil
}

// expandAnswer writes the answer of repetition i of n: "rem=A..B" counts
// from A towards B.
func expandAnswer(s string, i, n int) (string, error) {
	fields := strings.Fields(s)
	for f, field := range fields {
		parts := strings.Split(field, ",")
		for p, part := range parts {
			r, ok := strings.CutPrefix(part, "rem=")
			a, b, isRange := strings.Cut(r, "..")
			if !ok || !isRange {
				continue
			}
			from, err1 := strconv.Atoi(a)
			to, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil || abs(to-from)+1 != n {
				return "", fmt.Errorf("rem=%s over %d repetitions", r, n)
			}
			step := 1
			if to < from {
				step = -1
			}
			parts[p] = "rem=" + strconv.Itoa(from+i*step)
		}
		fields[f] = strings.Join(parts, ",")
	}
	return strings.Join(fields, " "), nil
}

func abs(n int) int { return max(n, -n) }

// answerString writes an answer as the corpus writes answers: the
// overall code, then each status (CODE[:RPU/UNIT[:NAME]][,rem=N][,reset=S]),
// then {the fields added, in order}, then the fields of the dynamic
// metadata the expected answer asks about (md:path=value), or "error
// CODE" for an error.
func answerString(r *rlsv3.RateLimitResponse, err error, want string) string {
	if err != nil {
		return "error " + status.Code(err).String()
	}
	parts := []string{r.GetOverallCode().String()}
	for _, st := range r.GetStatuses() {
		s := st.GetCode().String()
		if l := st.GetCurrentLimit(); l != nil {
			s += fmt.Sprintf(":%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			if l.GetName() != "" {
				s += ":" + l.GetName()
			}
		}
		if st.GetLimitRemaining() != 0 || st.GetCurrentLimit() != nil {
			s += fmt.Sprintf(",rem=%d", st.GetLimitRemaining())
		}
		if d := st.GetDurationUntilReset(); d != nil {
			s += fmt.Sprintf(",reset=%d", int64(d.AsDuration().Round(time.Second)/time.Second))
		}
		parts = append(parts, s)
	}
	if h := r.GetResponseHeadersToAdd(); len(h) > 0 {
		var kv []string
		for _, f := range h {
			kv = append(kv, f.GetKey()+"="+f.GetValue())
		}
		parts = append(parts, "{"+strings.Join(kv, ";")+"}")
	}
	for _, f := range strings.Fields(want) {
		if path, _, ok := strings.Cut(strings.TrimPrefix(f, "md:"), "="); ok && strings.HasPrefix(f, "md:") {
			parts = append(parts, "md:"+path+"="+metadataAt(r, path))
		}
	}
	return strings.Join(parts, " ")
}

// metadataAt returns the string at a dotted path of the answer's dynamic
// metadata, "" for none.
func metadataAt(r *rlsv3.RateLimitResponse, path string) string {
	v := r.GetDynamicMetadata()
	names := strings.Split(path, ".")
	for _, n := range names[:len(names)-1] {
		v = v.GetFields()[n].GetStructValue()
	}
	return v.GetFields()[names[len(names)-1]].GetStringValue()
}

// differences names how an answer differs from the reference's: "answer"
// (a code, a limit, a remaining count, an error), else "reset" (a
// duration_until_reset); and "fields" when the fields added differ.
func differences(got, want string) []string {
	if got == want {
		return nil
	}
	parts := func(s string) (answer, resets, fields string) {
		var a, r []string
		for _, f := range strings.Fields(s) {
			if strings.HasPrefix(f, "{") {
				fields = f
				continue
			}
			var keep []string
			for _, p := range strings.Split(f, ",") {
				if strings.HasPrefix(p, "reset=") {
					r = append(r, p)
				} else {
					keep = append(keep, p)
				}
			}
			a = append(a, strings.Join(keep, ","))
		}
		return strings.Join(a, " "), strings.Join(r, " "), fields
	}
	ga, gr, gf := parts(got)
	wa, wr, wf := parts(want)
	var kinds []string
	switch {
	case ga != wa:
		kinds = append(kinds, "answer")
	case gr != wr:
		kinds = append(kinds, "reset")
	}
	if gf != wf {
		kinds = append(kinds, "fields")
	}
	return kinds
}
