package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/cenkalti/backoff/v5"
	"github.com/redis/go-redis/v9"
)

// redisSettings are the reference's settings of its Redis client.
type redisSettings struct {
	kind                 string // SINGLE, CLUSTER or SENTINEL
	network              string // tcp or unix, for SINGLE
	user, password       string // REDIS_AUTH: password, or user:password (an ACL user)
	sentinelUser         string // REDIS_SENTINEL_AUTH, likewise
	sentinelPassword     string
	tls                  tlsFiles
	poolSize             int           // 0: go-redis's default
	timeout              time.Duration // dial, read and write; 0: go-redis's defaults
	healthCheck          bool          // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
	startFirst, startMax time.Duration // the waits between tries at start
	startGiveUp          time.Duration // 0: try until Redis answers
	tlsConfig            *tls.Config   // built from tls
}

// parseRedis reads the Redis client's settings.
func parseRedis(s *settings, e env) error {
	r := &s.redisOpts
	r.kind = strings.ToUpper(e.or("REDIS_TYPE", "SINGLE"))
	if r.kind != "SINGLE" && r.kind != "CLUSTER" && r.kind != "SENTINEL" {
		return fmt.Errorf("REDIS_TYPE %q: SINGLE, CLUSTER or SENTINEL", e.get("REDIS_TYPE"))
	}
	// The reference's default socket is a Unix one (nutcracker's); a
	// host:port over it could never connect, so a path means unix and
	// anything else tcp unless REDIS_SOCKET_TYPE says.
	r.network = "tcp"
	if strings.HasPrefix(s.redis, "/") {
		r.network = "unix"
	}
	if v, ok := e.lookup("REDIS_SOCKET_TYPE"); ok {
		r.network = strings.ToLower(v)
		if r.network != "tcp" && r.network != "unix" {
			return fmt.Errorf("REDIS_SOCKET_TYPE %q: tcp or unix", v)
		}
	}
	r.user, r.password = authOf(e.get("REDIS_AUTH"))
	r.sentinelUser, r.sentinelPassword = authOf(e.get("REDIS_SENTINEL_AUTH"))
	r.tls = tlsFiles{on: envBool(e, "REDIS_TLS"), cert: e.get("REDIS_TLS_CLIENT_CERT"), key: e.get("REDIS_TLS_CLIENT_KEY"),
		ca: e.get("REDIS_TLS_CACERT"), skipHostVerification: envBool(e, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION")}
	r.healthCheck = envBool(e, "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION")
	var err error
	if r.poolSize, err = envInt(e, "REDIS_POOL_SIZE", 0); err != nil {
		return err
	}
	if r.timeout, err = envDuration(e, "REDIS_TIMEOUT", 0); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
		def  time.Duration
	}{{"REDIS_STARTUP_INITIAL_INTERVAL", &r.startFirst, time.Second}, {"REDIS_STARTUP_MAX_INTERVAL", &r.startMax, 30 * time.Second}, {"REDIS_STARTUP_MAX_ELAPSED_TIME", &r.startGiveUp, 0}} {
		if *d.to, err = envDuration(e, d.name, d.def); err != nil {
			return err
		}
	}
	if r.tls.on || strings.HasPrefix(s.redis, "rediss://") {
		if r.tlsConfig, err = clientTLS(r.tls); err != nil {
			return err
		}
	}
	return nil
}

// authOf reads a REDIS_AUTH value: "password", or "user:password"
// for an ACL user, as the reference reads it.
func authOf(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// connect returns a client of the Redis the settings name, or of an
// embedded miniredis when none is, and the function that closes both.
func connect(s *settings, log *slog.Logger) (redis.UniversalClient, func(), error) {
	url, r := s.redis, &s.redisOpts
	if url == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.StartAddr("127.0.0.1:0"); err != nil {
			return nil, nil, err
		}
		log.Warn("NO REDIS GIVEN (-redis or REDIS_URL): rate-limit state is IN MEMORY, in an embedded miniredis: " +
			"lost when this process stops and NOT SHARED with other instances. Give -redis for production.")
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true})
		return rdb, func() { rdb.Close(); mr.Close() }, nil
	}
	uo, err := universalOptions(url, r)
	if err != nil {
		return nil, nil, err
	}
	var rdb redis.UniversalClient
	switch r.kind {
	case "CLUSTER":
		rdb = redis.NewClusterClient(uo.Cluster())
	case "SENTINEL":
		rdb = redis.NewFailoverClient(uo.Failover())
	default:
		o := uo.Simple()
		if !strings.Contains(url, "://") {
			o.Network = r.network
		}
		rdb = redis.NewClient(o)
	}
	return rdb, func() { rdb.Close() }, nil
}

// universalOptions are the client's options: those of a redis://,
// rediss:// or unix:// URL, or of the reference's forms (host:port or a
// socket path; a comma-separated list of nodes for a cluster; the
// master's name, then the sentinels, for Sentinel), with the reference's
// settings of authentication, TLS, pool and timeouts.
func universalOptions(url string, r *redisSettings) (*redis.UniversalOptions, error) {
	uo := &redis.UniversalOptions{ContextTimeoutEnabled: true}
	if strings.Contains(url, "://") {
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL (-redis): %v", err)
		}
		uo.Addrs, uo.Username, uo.Password, uo.DB, uo.TLSConfig = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig
		if o.Network == "unix" {
			r.network = "unix"
		}
	} else {
		uo.Addrs = strings.Split(url, ",")
		if r.kind == "SENTINEL" {
			if len(uo.Addrs) < 2 {
				return nil, errors.New("REDIS_TYPE=SENTINEL: REDIS_URL is the master's name, then the sentinels (mymaster,host:26379,host:26379)")
			}
			uo.MasterName, uo.Addrs = uo.Addrs[0], uo.Addrs[1:]
		}
	}
	if uo.Username == "" && uo.Password == "" {
		uo.Username, uo.Password = r.user, r.password
	}
	uo.SentinelUsername, uo.SentinelPassword = r.sentinelUser, r.sentinelPassword
	if r.tlsConfig != nil {
		uo.TLSConfig = r.tlsConfig
	}
	uo.PoolSize = r.poolSize
	if r.timeout > 0 {
		uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout = r.timeout, r.timeout, r.timeout
	}
	return uo, nil
}

// waitForRedis pings Redis until it answers, as the reference does before
// it serves: waiting REDIS_STARTUP_INITIAL_INTERVAL, then twice as long
// each time (with jitter) up to REDIS_STARTUP_MAX_INTERVAL, giving up
// after REDIS_STARTUP_MAX_ELAPSED_TIME (0: never) or when ctx ends.
func waitForRedis(ctx context.Context, rdb redis.UniversalClient, r *redisSettings, log *slog.Logger) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier = r.startFirst, r.startMax, 2
	ping := func() (struct{}, error) {
		pctx, cancel := context.WithTimeout(ctx, max(r.timeout, 5*time.Second))
		defer cancel()
		err := rdb.Ping(pctx).Err()
		if err != nil && ctx.Err() == nil {
			log.Warn("Redis does not answer yet; trying again", "err", err)
		}
		return struct{}{}, err
	}
	_, err := backoff.Retry(ctx, ping, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(r.startGiveUp), backoff.WithMaxTries(0))
	if err != nil {
		return fmt.Errorf("redis did not answer at start (REDIS_STARTUP_MAX_ELAPSED_TIME %v): %w", r.startGiveUp, err)
	}
	return nil
}
