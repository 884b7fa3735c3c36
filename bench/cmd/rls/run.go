package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/bench/internal/harness"
)

// cell is one load: concurrent callers over distinct descriptor values.
type cell struct{ callers, values int }

// measurement is one server's result in one cell and round.
type measurement struct {
	load       *load
	warm       *load
	mallocs    uint64 // the server process's, during the measurement
	mallocsOK  bool
	cmds       map[string]cmdStat
	srvUsec    float64 // INFO commandstats, see serverUsec
	srvCalls   int64
	cpuSec     float64       // redis-server's CPU, user and system
	procCPU    time.Duration // the server process's CPU, user and system
	procCPUOK  bool
	mallocsErr error
}

// exactResult is one server's answers in one round of the exactness check.
type exactResult struct {
	load    *load // requests of hits_addend 1
	costs   *load // requests of hits_addend 1 to cfg.ExactMaxHits, when asked
	edge    *load // 1 s of requests across the start of a minute, when asked
	crossed bool  // a burst crossed a minute of the wall clock
}

func cells(cfg config) []cell {
	var cs []cell
	for _, v := range cfg.Values {
		for _, c := range cfg.Callers {
			cs = append(cs, cell{callers: c, values: v})
		}
	}
	return cs
}

// run starts redis-server and the two servers and measures every cell in
// every round, then the exactness check and the profiles.
func run(ctx context.Context, cfg config, tmp string) (*report, error) {
	begin := time.Now()
	redisAddr, stopRedis, err := harness.StartRedis(cfg.RedisServer, tmp)
	if err != nil {
		return nil, err
	}
	defer stopRedis()
	rc := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 1, MaxRetries: -1})
	defer rc.Close()
	cfgDir, err := writeConfig(tmp, cfg.ExactLimit)
	if err != nil {
		return nil, err
	}

	cfg.progress("starting the reference server (%s)", cfg.RefBin)
	ref, err := startReference(ctx, cfg, "reference", tmp, cfgDir, redisAddr)
	if err != nil {
		return nil, err
	}
	defer ref.stop()
	var other *server
	if cfg.RedlimitBin == "ref" {
		cfg.progress("starting a second reference server in place of redlimit-rls")
		other, err = startReference(ctx, cfg, "reference-2", tmp, cfgDir, redisAddr)
	} else {
		cfg.progress("starting redlimit-rls (%s)", cfg.RedlimitBin)
		other, err = startRedlimit(ctx, cfg, tmp, cfgDir, redisAddr)
	}
	if err != nil {
		return nil, err
	}
	defer other.stop()

	rep := newReport(cfg, ref, other)
	if v, err := harness.RedisVersion(ctx, rc); err == nil && v != "" {
		rep.redisVersion = v
	} else {
		rep.redisVersion = "?"
	}
	sides := []*server{ref, other}
	for round := 0; round < cfg.Rounds; round++ {
		for i, c := range cells(cfg) {
			for _, s := range ordered(sides, round+i) {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				cfg.progress("round %d/%d, %d callers, %d values: %s", round+1, cfg.Rounds, c.callers, c.values, s.name)
				m, err := measure(ctx, cfg, rc, s, c)
				if err != nil {
					return nil, fmt.Errorf("%s, %d callers, %d values: %w", s.name, c.callers, c.values, err)
				}
				rep.add(s, c, m)
			}
		}
		if cfg.ExactRequests > 0 {
			for _, s := range ordered(sides, round) {
				cfg.progress("round %d/%d, exactness: %s", round+1, cfg.Rounds, s.name)
				e, err := exact(ctx, cfg, rc, s, round)
				if err != nil {
					return nil, fmt.Errorf("%s, exactness: %w", s.name, err)
				}
				rep.exact[s] = append(rep.exact[s], e)
			}
		}
	}
	if cfg.ProfileDir != "" {
		if err := os.MkdirAll(cfg.ProfileDir, 0o755); err != nil {
			return nil, err
		}
		for _, c := range cells(cfg) {
			for _, s := range sides {
				path := filepath.Join(cfg.ProfileDir, fmt.Sprintf("%s-c%d-v%d.pprof", s.name, c.callers, c.values))
				cfg.progress("profile: %s", path)
				if err := profileCell(ctx, cfg, rc, s, c, path); err != nil {
					rep.notes = append(rep.notes, fmt.Sprintf("no profile of %s: %v", s.name, err))
					break
				}
				rep.profiles = append(rep.profiles, path)
			}
		}
	}
	rep.took = time.Since(begin)
	return rep, nil
}

// ordered returns the two sides in turn's order: alternating.
func ordered(sides []*server, turn int) []*server {
	if turn%2 == 0 {
		return sides
	}
	return []*server{sides[1], sides[0]}
}

// measure flushes Redis, warms s up in cell c, then measures it.
func measure(ctx context.Context, cfg config, rc *redis.Client, s *server, c cell) (measurement, error) {
	var m measurement
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return m, err
	}
	reqs := requests(c.values)
	if cfg.Warmup > 0 {
		m.warm = drive(ctx, s.clients, reqs, c.callers, cfg.Warmup, cfg.MaxCalls)
	}
	if err := rc.ConfigResetStat(ctx).Err(); err != nil {
		return m, err
	}
	before, err := readRedisStats(ctx, rc)
	if err != nil {
		return m, err
	}
	mal0, err0 := s.mallocs(ctx)
	cpu0, errCPU0 := processCPU(s.cmd.Process.Pid)
	m.load = drive(ctx, s.clients, reqs, c.callers, cfg.Duration, cfg.MaxCalls)
	cpu1, errCPU1 := processCPU(s.cmd.Process.Pid)
	mal1, err1 := s.mallocs(ctx)
	if errCPU0 == nil && errCPU1 == nil {
		m.procCPU, m.procCPUOK = cpu1-cpu0, true
	}
	after, err := readRedisStats(ctx, rc)
	if err != nil {
		return m, err
	}
	if err := ctx.Err(); err != nil {
		return m, err
	}
	switch {
	case err0 != nil:
		m.mallocsErr = err0
	case err1 != nil:
		m.mallocsErr = err1
	default:
		m.mallocs, m.mallocsOK = mal1-mal0, true
	}
	m.cmds = after.cmds
	m.srvUsec, m.srvCalls = serverUsec(after.cmds)
	m.cpuSec = after.cpu - before.cpu
	return m, nil
}

// exact sends cfg.ExactRequests requests for one value of exactKey, limited
// to cfg.ExactLimit a minute, from cfg.ExactCallers callers, on a flushed
// Redis; then, if cfg.ExactMaxHits > 1, as many for another value with
// hits_addend 1, 2, … cfg.ExactMaxHits in turn. Each burst starts early in
// a minute of the wall clock, so that a window aligned on the clock's
// minutes (the reference's) does not roll over in its middle; crossed says
// if one did anyway.
func exact(ctx context.Context, cfg config, rc *redis.Client, s *server, round int) (exactResult, error) {
	var res exactResult
	burst := func(value string, maxHits int) (*load, error) {
		if err := rc.FlushAll(ctx).Err(); err != nil {
			return nil, err
		}
		if now := time.Now(); now.Second() >= 50 {
			wait := now.Truncate(time.Minute).Add(time.Minute + 100*time.Millisecond).Sub(now)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		var reqs []*pb.RateLimitRequest
		for h := 1; h <= maxHits; h++ {
			reqs = append(reqs, request(exactKey, value, uint32(h)))
		}
		start := time.Now()
		l := drive(ctx, s.clients, reqs, cfg.ExactCallers, time.Minute, int64(cfg.ExactRequests))
		if !start.Truncate(time.Minute).Equal(time.Now().Truncate(time.Minute)) {
			res.crossed = true
		}
		return l, ctx.Err()
	}
	var err error
	if res.load, err = burst(fmt.Sprintf("round%d", round), 1); err != nil {
		return res, err
	}
	if cfg.ExactMaxHits > 1 {
		if res.costs, err = burst(fmt.Sprintf("costs%d", round), cfg.ExactMaxHits); err != nil {
			return res, err
		}
	}
	if cfg.ExactEdge {
		res.edge, err = edgeBurst(ctx, cfg, rc, s, fmt.Sprintf("edge%d", round))
	}
	return res, err
}

// edgeBurst sends requests of one hit for one value of exactKey from
// cfg.ExactCallers callers for one second, from half a second before a
// minute of the wall clock begins, on a flushed Redis: a window aligned on
// the clock's minutes admits up to twice the limit in that second.
func edgeBurst(ctx context.Context, cfg config, rc *redis.Client, s *server, value string) (*load, error) {
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	begin := now.Truncate(time.Minute).Add(time.Minute - 500*time.Millisecond)
	if begin.Before(now.Add(100 * time.Millisecond)) {
		begin = begin.Add(time.Minute)
	}
	select {
	case <-time.After(time.Until(begin)):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	reqs := []*pb.RateLimitRequest{request(exactKey, value, 1)}
	return drive(ctx, s.clients, reqs, cfg.ExactCallers, time.Second, 1<<62), ctx.Err()
}

// profileCell drives s in cell c while taking a CPU profile of it.
func profileCell(ctx context.Context, cfg config, rc *redis.Client, s *server, c cell, path string) error {
	if s.pprofURL == "" {
		return fmt.Errorf("no /debug/pprof/ endpoint")
	}
	if err := rc.FlushAll(ctx).Err(); err != nil {
		return err
	}
	reqs := requests(c.values)
	if cfg.Warmup > 0 {
		drive(ctx, s.clients, reqs, c.callers, cfg.Warmup, cfg.MaxCalls)
	}
	d := max(time.Second, cfg.Duration.Round(time.Second))
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A little longer than the profile, so that the load covers it.
		drive(ctx, s.clients, reqs, c.callers, d+time.Second, 1<<62)
	}()
	err := s.profile(ctx, d, path)
	<-done
	return err
}
