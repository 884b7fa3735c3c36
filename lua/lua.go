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
// function beside its decide function, so an algorithm is one file.
//
// Redis runs a script's whole body on every call, so every function a
// script defines costs every call. Hence the marks, each a line of its own.
// What only settlements run (the settle functions, meter.lua's refunds)
// follows a line "--- settle ---" in its file, and a decision script
// leaves it out. And the common decision (one limit, no reservation or
// prefetch, a cost of 0 or more) goes first: a file's part before its line
// "--- general ---" (the prelude's clock, decide.lua's quick, one.lua's
// call of quick) comes before the rest of every file, and an algorithm's
// fast path (in its file, between a line "--- fast ---" and that line)
// goes in quick, at its line "--- fast paths ---". So a decision its fast
// path makes returns before the script defines what only the general path
// needs; quick returns nothing, having written nothing, for any other.
// A settlement script takes the prelude's first part alone. A batch
// script, whose calls may be common or not, defines the general path only
// when a call needs it: it wraps the rest of every file but batch.lua in
// a function, general, that batch.lua calls the first time quick does
// not decide a call, and that returns decide.lua's decide and
// settle.lua's settle.
//
// Every script replies with an array of integers. The scripts are plain
// text; package core runs them with EVALSHA. This package uses the
// standard library only and exports nothing that can be reassigned.
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

// assemble returns the script of the named algorithms' files that ends
// with the file end: the first parts of its files, with the algorithms'
// fast paths in decide.lua's quick, then the rest of each, up to its
// settle mark in a decision script.
func assemble(end string, names []string) string {
	files := append([]string{"prelude", "meter"}, names...)
	switch end {
	case "one":
		files = append(files, "decide", "one")
	case "batch":
		files = append(files, "decide", "settle", "batch")
	default:
		files = append(files, "settle", end)
	}
	var first, paths, rest strings.Builder
	for _, name := range names {
		_, path, _ := split(name)
		paths.WriteString(path)
	}
	for _, name := range files {
		part, _, general := split(name)
		first.WriteString(strings.Replace(part, pathsMark, paths.String(), 1))
		if i := strings.Index(general, "\n"+settleMark); end == "one" && i >= 0 {
			general = general[:i+1] // a decision script runs no settlement
		}
		if name == "batch" { // the general path, defined when a call needs it
			general = batchGeneral + rest.String() + "return decide, settle\nend\n" + general
			rest.Reset()
		}
		rest.WriteString(general)
	}
	return first.String() + rest.String()
}

// batchGeneral opens the function a batch script wraps its general path
// in (see the package doc).
const batchGeneral = "-- general defines the general path and returns decide and settle.\nlocal function general()\n"

// Del returns the script that deletes every key in KEYS and replies with
// {how many existed}. It exists because redis.Scripter offers scripts but
// no DEL.
func Del() string { return read("del") }

// Peers returns the heartbeat script of the instances that share
// FailLocal's limits (peers.lua).
func Peers() string { return read("peers") }

// The marks that split a file (see the package doc), each a line.
const (
	generalMark = "--- general ---\n"
	fastMark    = "--- fast ---\n"
	pathsMark   = "--- fast paths ---\n" // in decide.lua's quick
	settleMark  = "--- settle ---\n"
)

// split returns the named file's first part (the text before its
// generalMark line), its fast path (in an algorithm's file: between its
// fastMark and generalMark lines; then it has no first part) and the rest.
func split(name string) (first, path, rest string) {
	src := read(name)
	first, rest, ok := strings.Cut(src, "\n"+generalMark)
	if !ok {
		return "", "", src
	}
	first += "\n"
	if head, path, ok := strings.Cut(first, "\n"+fastMark); ok {
		return "", path, head + "\n" + rest
	}
	return first, "", rest
}

func read(name string) string {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua: no script %s.lua", name))
	}
	return string(b)
}
