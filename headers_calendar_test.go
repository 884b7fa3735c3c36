package redlimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// TestDraftCalendarWindow: a policy's answer announces a calendar month's
// quota with the current month's length in seconds, as the calendar has
// it (2 592 000 in November), never the mean month's 2 629 746.
func TestDraftCalendarWindow(t *testing.T) {
	t.Parallel()
	l, err := core.ParseLimit("60/month fixed_window calendar")
	if err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, stillLimiter(t), l, redlimit.WithName("quota"), redlimit.WithHeaders(redlimit.HeadersDraft))
	month := func() int64 {
		now := time.Now().UTC()
		first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return int64(first.AddDate(0, 1, 0).Sub(first) / time.Second)
	}
	before := month()
	w := send(p)
	if after := month(); after != before {
		t.Skip("the month changed during the request") // a moment once a month
	}
	want := `"quota";q=60;w=` + strconv.FormatInt(before, 10)
	if got := w.Header().Get("RateLimit-Policy"); got != want {
		t.Errorf("RateLimit-Policy %q, want %q", got, want)
	}
}
