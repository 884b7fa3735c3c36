// Package lua holds the Redis scripts behind every redlimit decision.
//
// A decision script is the prelude (prelude.lua: the clock, the table of
// algorithms), then one or more algorithms' files, each of which adds its
// decide function to that table, then decide.lua, which decides every
// limit in KEYS and stores their new state only if all allow. So one
// script decides one limit or several, all or nothing, and a limit's state
// is the same whichever way it was decided. Every script replies with an
// array of integers. The scripts are plain text; package core runs them
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
func Decision(names ...string) string {
	var b strings.Builder
	b.WriteString(read("prelude"))
	for _, name := range names {
		b.WriteString(read(name))
	}
	b.WriteString(read("decide"))
	return b.String()
}

// Del returns the script that deletes every key in KEYS and replies with
// {how many existed}. It exists because redis.Scripter offers scripts but
// no DEL.
func Del() string { return read("del") }

func read(name string) string {
	b, err := files.ReadFile(name + ".lua")
	if err != nil {
		panic(fmt.Sprintf("lua: no script %s.lua", name))
	}
	return string(b)
}
