// Package lua holds the Redis scripts behind every redlimit decision, as
// files: scripts/<name>.lua is exactly what Redis runs.
//
// Each algorithm has a script of its own (scripts/gcra.lua, ...), which
// decides limits of that algorithm, one or several at once, all or
// nothing, and settles their reservations; scripts/all.lua does the same
// for any mix of algorithms. A script also takes a batch of decisions and
// settlements in one call (main.lua), which the engine sends to a single
// server. A limit's state is the same whichever script decided it.
//
// The algorithm scripts are generated (go generate) from their parts in
// src/: head.lua, each algorithm's fast path (src/<name>_fast.lua, for
// gcra, token_bucket and fixed_window), the general path (body.lua,
// meter.lua, the algorithm files and decide.lua, defined only when a call
// needs them; the parts of meter.lua and the algorithm files after their
// "--- settle ---" line and settle.lua only when a call settles) and
// main.lua; internal/assemble says how, and a test checks that the files
// are what it would write. scripts/del.lua, scripts/peers.lua and
// scripts/generation.lua are written by hand. Each file opens with a comment
// naming its KEYS, ARGV and reply; internal/wire is the Go side of them.
//
// This package uses the standard library only (and its own assemble) and
// exports nothing that can be reassigned.
package lua

//go:generate go run ./gen

import (
	"embed"
	"fmt"
	"slices"

	"github.com/redlimit/redlimit/lua/internal/assemble"
)

//go:embed scripts/*.lua src/*.lua
var files embed.FS

// Script returns the script of the named algorithm ("gcra", "sliding_log",
// ...), or of every algorithm for "all". It panics if there is none, a
// programming error found by the first test that uses it.
func Script(name string) string { return read("scripts/" + name) }

// Del returns the script that deletes every key in KEYS and replies with
// {how many existed}. It exists because redis.Scripter offers scripts but
// no DEL.
func Del() string { return read("scripts/del") }

// Peers returns the heartbeat script of the instances that share
// FailLocal's limits (scripts/peers.lua).
func Peers() string { return read("scripts/peers") }

// Generation returns the script of the marker by which a Limiter notices
// that a Redis server lost its state (scripts/generation.lua).
func Generation() string { return read("scripts/generation") }

// Algorithms returns the algorithm files, each of which has a script
// (Script(name)).
func Algorithms() []string { return slices.Clone(assemble.Algorithms) }

func read(name string) string {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua: no script %s.lua", name))
	}
	return string(b)
}
