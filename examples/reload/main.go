// Command reload serves a small net/http API limited by a rules file and
// reloads the file when it gets SIGHUP: edit the limits, send the signal,
// and the next request is decided under the new rules, with no restart and
// no request left unlimited in between. A rule whose pattern and
// algorithm stay keeps its count. A file with a mistake is refused and
// logged, and the rules in force stay.
//
//	go run ./examples/reload                    # writes a sample rules file and prints its path
//	go run ./examples/reload -rules rules.json
//	kill -HUP <pid>                             # after editing the file
//
// ADDR sets the address to listen on, REDIS_URL a real Redis to keep the
// limits in (REDIS_URL=redis://localhost:6379/0); -h says so.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/nethttp"
)

// sample is the rules file written when -rules is not given.
const sample = `{
  "*": "20/s",
  "POST /login": "5/m sliding_log",
  "GET /api/*": "10/s, 5000/d fixed_window"
}
`

// readRules reads a rules file: a JSON object of pattern to limit string.
func readRules(path string) (redlimit.Rules, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return redlimit.ParseRules(data)
}

// load builds the RuleSet of the rules file at path, keyed by client
// address (the default).
func load(lim *core.Limiter, path string) (*redlimit.RuleSet, error) {
	rules, err := readRules(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return redlimit.NewRuleSet(lim, rules)
}

// reload reads the rules file again and puts its rules in place of the
// RuleSet's, atomically for requests in flight. On any error the RuleSet
// keeps the rules it has.
func reload(rs *redlimit.RuleSet, path string) error {
	rules, err := readRules(path)
	if err != nil {
		return err
	}
	return rs.Update(rules)
}

// watch reloads the rules file on every signal, until signals is closed,
// and logs what became of each reload.
func watch(signals <-chan os.Signal, rs *redlimit.RuleSet, path string, log *slog.Logger) {
	for range signals {
		if err := reload(rs, path); err != nil {
			log.Error("rules not reloaded; the rules in force stay", "file", path, "error", err)
			continue
		}
		log.Info("rules reloaded", "file", path)
	}
}

// hangups returns a channel that receives SIGHUP, which no longer ends
// the process.
func hangups() chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c
}

// newApp is the API behind the rules table.
func newApp(rs *redlimit.RuleSet) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", text("hello\n"))
	mux.HandleFunc("POST /login", text("welcome\n"))
	mux.HandleFunc("GET /api/orders", text("[]\n"))
	return nethttp.Middleware(rs)(mux)
}

func text(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) }
}

// writeSample writes the sample rules to a new temporary file.
func writeSample() (string, error) {
	f, err := os.CreateTemp("", "redlimit-rules-*.json")
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(sample); err != nil {
		f.Close()
		return "", err
	}
	return f.Name(), f.Close()
}

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/reload",
	Doc: `A small net/http API limited by a rules file (a JSON object of pattern to
limit string), reloaded on SIGHUP: the next request is decided under the
new rules, a rule whose pattern and algorithm stay keeps its count, and a
file with a mistake is refused and logged while the rules in force stay.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	rulesFile := flag.String("rules", "", "the rules `file` (default: a sample, written to a temporary file)")
	command.Parse()
	rdb, where, stop, err := run.Redis()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	path := *rulesFile
	if path == "" {
		if path, err = writeSample(); err != nil {
			log.Fatal(err)
		}
	}
	rs, err := load(core.New(rdb), path)
	if err != nil {
		log.Fatal(err)
	}
	go watch(hangups(), rs, path, slog.Default())
	addr := os.Getenv(run.Addr)
	if addr == "" {
		addr = run.DefaultAddr
	}
	fmt.Printf("reload example on http://%s, limits kept in %s\nrules from %s; after editing it:\n  kill -HUP %d\n",
		addr, where, path, os.Getpid())
	log.Fatal(http.ListenAndServe(addr, newApp(rs)))
}
