// Package lua holds the Redis scripts behind every redlimit decision.
//
// A decision script is the prelude (prelude.lua: the clock, the table of
// algorithms), then one or more algorithms' files, each of which adds its
// decide function to that table, then decide.lua, whose function decides
// the limits of one decision and stores their new state only if all allow,
// then one.lua, which makes the one decision in KEYS. So one script
// decides one limit or several, all or nothing, and a limit's state is the
// same whichever way it was decided. A batch script ends with batch.lua
// instead: it makes several independent decisions (and settlements) in
// one call, for the engine to send what waits together to a single
// server. A settlement script is the prelude, the algorithms' files,
// settle.lua and one_settle.lua: each algorithm's file adds a settle
// function beside its decide function, so an algorithm is one file. What
// only settlements run (the settle functions, meter.lua's refunds) follows
// a line "--- settle ---" in its file, and a decision script leaves it
// out: Redis runs a script's whole body on every call, so every function
// a script defines costs every call. Every script replies with an array
// of integers. The scripts are plain text; package core runs them
// with EVALSHA. This package uses the standard library only and exports
// nothing that can be reassigned.
package lua

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Decision returns the decision script for the algorithms in the named
// files (name.lua, in the order given). It panics if a file is missing, a
// programming error found by the first test that uses it.
func Decision(names ...string) string { return assemble("one", names) }

// Batch returns the script that makes several decisions and settlements
// in one call, each of the algorithms in the named files (batch.lua). It
// panics as Decision does.
func Batch(names ...string) string { return assemble("batch", names) }

// Settle returns the script that settles a reservation of limits of the
// algorithms in the named files (settle.lua). It panics as Decision does.
func Settle(names ...string) string { return assemble("one_settle", names) }

// assemble returns the prelude, the named algorithms' files, the functions
// the end file calls (decide.lua, settle.lua) and the end file.
func assemble(end string, names []string) string {
	part := read
	if end == "one" {
		part = decisionPart
	}
	var b strings.Builder
	b.WriteString(read("prelude"))
	b.WriteString(part("meter"))
	for _, name := range names {
		b.WriteString(part(name))
	}
	if end != "one_settle" {
		b.WriteString(read("decide"))
	}
	if end != "one" {
		b.WriteString(read("settle"))
	}
	b.WriteString(read(end))
	return b.String()
}

// Del returns the script that deletes every key in KEYS and replies with
// {how many existed}. It exists because redis.Scripter offers scripts but
// no DEL.
func Del() string { return read("del") }

// Peers returns the heartbeat script of the instances that share
// FailLocal's limits (peers.lua).
func Peers() string { return read("peers") }

// settleMark opens the part of a file that only settlements run.
const settleMark = "--- settle ---\n"

// decisionPart returns the named file up to its settleMark line, if any.
func decisionPart(name string) string {
	src := read(name)
	if i := strings.Index(src, "\n"+settleMark); i >= 0 {
		return src[:i+1]
	}
	return src
}

func read(name string) string {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua: no script %s.lua", name))
	}
	return string(b)
}
