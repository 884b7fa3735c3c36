package core

import (
	"fmt"
	"sync"
	"time"
)

// Calendar windows: a fixed window whose windows follow the calendar in a
// time zone. The client computes boundaries around its own clock (local
// midnights, Mondays or firsts of the month: time.Date does the DST
// arithmetic, so a day is 23 or 25 hours where the zone changes), and the
// script picks the window that holds the Redis clock's now, so time still
// comes from Redis unless WithClock.

// zones caches the locations of the zones limits name.
var zones sync.Map // name -> *time.Location

// zone returns the location of an IANA time zone name. "Local" is
// refused: the processes sharing a key must agree on the windows.
func zone(name string) (*time.Location, error) {
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if name == "Local" || name == "" {
		return nil, fmt.Errorf("calendar=%q: name a time zone (\"UTC\", \"Europe/Berlin\"); every process sharing the key must agree on it", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("calendar=%q: %v (a binary on a system without the zone database imports time/tzdata)", name, err)
	}
	zones.Store(name, loc)
	return loc, nil
}

// windowStart returns the start of the calendar window of period (day,
// week or month) that holds t in loc, moved by shift windows.
func windowStart(t time.Time, loc *time.Location, period time.Duration, shift int) time.Time {
	y, m, d := t.In(loc).Date()
	switch period {
	case week:
		monday := (int(t.In(loc).Weekday()) + 6) % 7 // days since Monday
		return midnight(y, m, d-monday+7*shift, loc)
	case month:
		return midnight(y, m+time.Month(shift), 1, loc)
	}
	return midnight(y, m, d+shift, loc)
}

// midnight returns the first instant of a day in loc (its numbers
// normalized as time.Date's are). Where a change of offset skips
// midnight (America/Santiago in September: 23:59:59 is followed by
// 01:00), time.Date may give 23:00 of the day before; the day then starts
// when the day before's offset ends.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Hour() >= 12 {
		_, t = t.ZoneBounds()
	}
	return t
}

// calendarPeriod names a calendar window's period: "d", "w" or "month".
func calendarPeriod(period time.Duration) string {
	switch period {
	case week:
		return "w"
	case month:
		return "month"
	}
	return "d"
}

// calendar is a calendar limit's boundaries, kept boxed for the window
// the clock is in, so that a call allocates nothing while it lasts.
type calendar struct {
	loc    *time.Location
	period time.Duration

	mu       sync.Mutex
	from, to time.Time // the current window, by the client's clock
	args     [4]any    // previous, current, next, next-but-one window starts, µs
}

func newCalendar(l Limit) (*calendar, error) {
	loc, err := zone(l.Calendar)
	if err != nil {
		return nil, err
	}
	return &calendar{loc: loc, period: l.Period}, nil
}

// appendBounds appends to args the starts of four windows around now, in
// µs: the script picks the one that holds its now among the first three.
func (c *calendar) appendBounds(args []any, now time.Time) []any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Before(c.from) || !now.Before(c.to) {
		for i := range c.args {
			c.args[i] = windowStart(now, c.loc, c.period, i-1).UnixMicro()
		}
		c.from, c.to = windowStart(now, c.loc, c.period, 0), windowStart(now, c.loc, c.period, 1)
	}
	return append(args, c.args[:]...)
}
