package main

import (
	"net/http"
	"testing"
)

// maxFiles is issue 33's bound on the Go files one gin request runs
// through, from the adapter to the script and back.
const maxFiles = 10

// TestWalk: an allowed and a denied request through gin's middleware each
// run at most maxFiles Go files of redlimit (docs/engine.md, "One
// request's walk").
func TestWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("builds redlimit with coverage")
	}
	for _, c := range []struct {
		deny   bool
		status int
	}{{false, http.StatusOK}, {true, http.StatusTooManyRequests}} {
		w, err := walk(c.deny)
		if err != nil {
			t.Fatal(err)
		}
		if w.Status != c.status {
			t.Errorf("deny=%v: status %d, want %d", c.deny, w.Status, c.status)
		}
		var names []string
		for _, f := range w.Files {
			names = append(names, f.Name)
		}
		t.Logf("deny=%v: %d files: %v", c.deny, len(names), names)
		if len(names) > maxFiles {
			t.Errorf("deny=%v: the request ran %d files, want at most %d: %v", c.deny, len(names), maxFiles, names)
		}
		if len(names) < 5 {
			t.Errorf("deny=%v: only %v ran: the walk did not see the request", c.deny, names)
		}
	}
}
