// Package core makes distributed rate-limit decisions on Redis.
//
// A Limiter runs one atomic Lua script per decision, so any number of
// processes sharing a Redis (standalone, Sentinel or Cluster) enforce one
// limit exactly. A Limit says how many events per period, and with which
// Algorithm; GCRA is the default.
//
//	lim := core.New(rdb) // rdb: *redis.Client, *redis.ClusterClient, ...
//	res, err := lim.Allow(ctx, "user:42", core.PerMinute(100))
//	if err != nil {
//		// Redis is down or slow: decide whether to fail open or closed.
//	}
//	if !res.Allowed {
//		// try again after res.RetryAfter
//	}
//
// Time comes from the Redis server's clock unless WithClock is given. All
// arithmetic in the scripts is in integer microseconds.
//
// Package core knows nothing about HTTP; see the nethttp, ginlimit and
// echolimit packages for middleware.
package core
