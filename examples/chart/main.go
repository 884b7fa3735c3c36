// Command chart drives the same bursty traffic through every redlimit
// algorithm and draws what each admitted and rejected as an SVG, one panel
// per algorithm. It runs on embedded Redis (miniredis) with a controlled
// clock, so the picture is the same on every run.
//
//	go run ./examples/chart -o docs/algorithms.svg
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
)

// limits are drawn top to bottom, all 10 per second.
var limits = []core.Limit{
	{Algorithm: core.FixedWindow, Rate: 10, Period: time.Second},
	{Algorithm: core.SlidingWindow, Rate: 10, Period: time.Second},
	{Algorithm: core.SlidingLog, Rate: 10, Period: time.Second},
	{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second},
	{Algorithm: core.TokenBucket, Rate: 10, Period: time.Second, Stepped: true},
	{Algorithm: core.GCRA, Rate: 10, Period: time.Second},
	{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second},
	{Algorithm: core.LeakyBucket, Rate: 10, Period: time.Second, Shape: true},
}

// span is the time the traffic covers.
const span = 4 * time.Second

// arrivals returns the traffic: a burst, a steady stream above the limit,
// a burst straddling the window edge at 3s, and a stream at the limit.
func arrivals() []time.Duration {
	var at []time.Duration
	spread := func(from, to time.Duration, n int) {
		for i := 0; i < n; i++ {
			at = append(at, from+time.Duration(i)*(to-from)/time.Duration(n))
		}
	}
	spread(0, 100*time.Millisecond, 25)
	spread(500*time.Millisecond, 2500*time.Millisecond, 30)
	spread(2900*time.Millisecond, 3100*time.Millisecond, 30)
	spread(3300*time.Millisecond, span, 7)
	return at
}

// outcome of one request under one limit.
type outcome struct {
	at      time.Duration
	allowed bool
	served  time.Duration // at + Delay, when allowed
}

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/chart",
	Doc: `Draws what every algorithm admits of the same bursty traffic, as an SVG.
It runs on an embedded miniredis with a controlled clock, so the picture
is the same on every run; it reads no environment variables.`,
}

func main() {
	out := flag.String("o", "docs/algorithms.svg", "where to write the SVG")
	command.Parse()
	panels, err := simulate()
	if err != nil {
		log.Fatal(err)
	}
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if err := draw(f, panels); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", *out)
}

// simulate sends every arrival through every limit, in time order, on
// embedded Redis, with the Limiter's clock (and Redis's) set to each
// arrival.
func simulate() ([][]outcome, error) {
	m, err := miniredis.Run()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	// A scripted run, not a server: it waits for a slow machine rather
	// than fail a decision at the default 100 ms.
	lim := core.New(rdb, core.WithClock(func() time.Time { return now }), core.WithTimeout(10*time.Second))

	panels := make([][]outcome, len(limits))
	for _, at := range arrivals() {
		now = start.Add(at)
		m.SetTime(now)
		for i, l := range limits {
			// A key per panel: both leaky bucket modes keep the same level,
			// so they would otherwise share one bucket.
			res, err := lim.Allow(context.Background(), fmt.Sprintf("client%d", i), l)
			if err != nil {
				return nil, err
			}
			panels[i] = append(panels[i], outcome{at, res.Allowed, at + res.Delay})
		}
	}
	return panels, nil
}

// Drawing: one panel per limit; admitted requests are green ticks above the
// axis, rejected ones red ticks below it; for a shaping limit, blue dots on
// the axis mark when each admitted request is served.
const (
	width, left, right = 960, 250, 20
	top, panelHeight   = 50, 64
	tick               = 18
)

func x(t time.Duration) float64 {
	return left + float64(t)/float64(span)*(width-left-right)
}

func draw(w io.Writer, panels [][]outcome) error {
	height := top + len(panels)*panelHeight + 30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">The same %d requests through each algorithm, all limited to 10 per second</text>`+"\n", left-230, len(panels[0]))
	fmt.Fprintf(&b, `<text x="%d" y="40" fill="#555"><tspan fill="#2a9d4b">▮ admitted</tspan>   <tspan fill="#d62828">▮ rejected</tspan>   <tspan fill="#1d4ed8">● served (shaping)</tspan>   dashed: 1-second window edges</text>`+"\n", left-230)
	for s := time.Duration(0); s <= span; s += time.Second {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb" stroke-dasharray="4 4"/>`+"\n", x(s), top, x(s), top+len(panels)*panelHeight)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%ds</text>`+"\n", x(s), top+len(panels)*panelHeight+18, int(s/time.Second))
	}
	for i, outcomes := range panels {
		mid := top + i*panelHeight + panelHeight/2
		admitted := 0
		fmt.Fprintf(&b, `<g class="panel">`+"\n")
		for _, o := range outcomes {
			if o.allowed {
				admitted++
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#2a9d4b" stroke-width="1.5"/>`+"\n", x(o.at), mid-tick, x(o.at), mid-2)
				if o.served != o.at {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%d" r="2.5" fill="#1d4ed8"/>`+"\n", x(o.served), mid)
				}
			} else {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62828" stroke-width="1.5"/>`+"\n", x(o.at), mid+2, x(o.at), mid+tick)
			}
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, mid, width-right, mid)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left-230, mid-4, limits[i].Algorithm)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s: %d of %d admitted</text>`+"\n", left-230, mid+13, variantName(limits[i]), admitted, len(outcomes))
		fmt.Fprintf(&b, "</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// variantName says which variant a panel shows.
func variantName(l core.Limit) string {
	switch {
	case l.Stepped:
		return "stepped"
	case l.Shape:
		return "shaping"
	case l.Algorithm == core.LeakyBucket:
		return "policing"
	case l.Algorithm == core.TokenBucket:
		return "continuous"
	}
	return "10/s"
}
