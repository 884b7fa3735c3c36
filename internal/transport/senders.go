package transport

import (
	"context"
	"slices"
	"time"
)

// The senders of a lane: the goroutines that take its queued calls, as
// many as Config.Batch at a time, in one round trip each (trip.go).

// Sender settings.
const (
	senderLinger   = time.Second // a sender without work waits this long, then stops
	queuePerSender = 16          // the queue holds this many full batches per sender
)

// submit queues c, and wakes an idle sender or starts one if none is busy
// enough to take it next.
func (ln *lane) submit(c *Call) error {
	ln.mu.Lock()
	if len(ln.queue) >= ln.t.queued {
		ln.mu.Unlock()
		return ln.t.errs.queueFull
	}
	ln.queue = append(ln.queue, c)
	if n := len(ln.idle); n > 0 {
		s := ln.idle[n-1]
		ln.idle[n-1] = nil
		ln.idle = ln.idle[:n-1]
		ln.mu.Unlock()
		s.wake <- struct{}{}
		return nil
	}
	if ln.alive < ln.t.senders {
		ln.alive++
		ln.mu.Unlock()
		s := &sender{ln: ln, wake: make(chan struct{}, 1)}
		go s.run()
		return nil
	}
	ln.mu.Unlock()
	return nil
}

// sender is one goroutine that runs queued calls of a lane, one round trip
// at a time.
type sender struct {
	ln    *lane
	wake  chan struct{} // one value when an idle sender is handed work
	batch []*Call
	trip  trip
}

// run takes batches until there has been no work for the lane's linger.
func (s *sender) run() {
	ln := s.ln
	timer := time.NewTimer(time.Duration(ln.t.linger.Load()))
	defer timer.Stop()
	for {
		ln.mu.Lock()
		if len(ln.queue) == 0 {
			if !s.idleWait(timer) {
				return
			}
			continue
		}
		s.take()
		ln.mu.Unlock()
		ln.busy.Add(1)
		s.send()
		ln.busy.Add(-1)
	}
}

// idleWait waits, the lane's lock held on entry and released, for work or
// the linger; it reports whether the sender goes on.
func (s *sender) idleWait(timer *time.Timer) bool {
	ln := s.ln
	ln.idle = append(ln.idle, s)
	ln.mu.Unlock()
	timer.Reset(time.Duration(ln.t.linger.Load()))
	select {
	case <-s.wake:
		timer.Stop()
		return true
	case <-timer.C:
	}
	ln.mu.Lock()
	if i := slices.Index(ln.idle, s); i >= 0 { // nobody handed us work: stop
		ln.idle = append(ln.idle[:i], ln.idle[i+1:]...)
		ln.alive--
		idle := ln.alive == 0 && len(ln.queue) == 0
		ln.mu.Unlock()
		if idle {
			ln.t.forget(ln)
		}
		return false
	}
	ln.mu.Unlock()
	<-s.wake // handed work just now; the wake is on its way
	return true
}

// take moves up to a batch of the queue to s.batch; the lane's lock is held.
func (s *sender) take() {
	ln := s.ln
	n := min(len(ln.queue), ln.t.batch)
	s.batch = append(s.batch[:0], ln.queue[:n]...)
	rest := copy(ln.queue, ln.queue[n:])
	clear(ln.queue[rest:])
	ln.queue = ln.queue[:rest]
}

// send runs the batch and answers every call in it, but for those whose
// callers left while queued: they never reach Redis. The round trip ends
// at the calls' latest deadline, if all have one, on a client that bounds
// commands by it, or on any while the lane fails (so that go-redis stops
// redialling a refused connection at the deadline).
func (s *sender) send() {
	live := s.batch[:0]
	var due time.Time
	bounded := true
	for _, c := range s.batch {
		if c.state.Load() == abandoned {
			c.recycle()
			continue
		}
		live = append(live, c)
		bounded = bounded && !c.due.IsZero()
		if c.due.After(due) {
			due = c.due
		}
	}
	clear(s.batch[len(live):])
	if len(live) == 0 {
		return
	}
	ctx := context.Background()
	if bounded && (s.ln.t.cl.bounded || s.ln.failing()) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, due)
		defer cancel()
	}
	s.ln.roundTrip(ctx, &s.trip, live)
	clear(live)
}
