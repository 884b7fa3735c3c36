// Package lua holds the Redis scripts behind every redlimit decision.
//
// Each decision script is the shared prelude (prelude.lua: arguments, clock,
// helpers) followed by one algorithm's body, so every script takes the same
// ARGV and replies in the same shape. The scripts are plain strings; package
// core runs them with EVALSHA. This package uses the standard library only.
package lua

import _ "embed"

//go:embed prelude.lua
var prelude string

var (
	//go:embed gcra.lua
	gcra string
	//go:embed token_bucket.lua
	tokenBucket string
	//go:embed token_bucket_stepped.lua
	tokenBucketStepped string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_window.lua
	slidingWindow string
	//go:embed sliding_log.lua
	slidingLog string
	//go:embed leaky_bucket.lua
	leakyBucket string
)

// Decision scripts, one per algorithm: KEYS and ARGV as documented at the
// top of prelude.lua and of each algorithm's file.
var (
	GCRA               = prelude + gcra
	TokenBucket        = prelude + tokenBucket
	TokenBucketStepped = prelude + tokenBucketStepped
	FixedWindow        = prelude + fixedWindow
	SlidingWindow      = prelude + slidingWindow
	SlidingLog         = prelude + slidingLog
	LeakyBucket        = prelude + leakyBucket
)

// Del deletes every key passed in KEYS and replies with how many existed.
// It exists because redis.Scripter offers scripts but no DEL.
//
//go:embed del.lua
var Del string
