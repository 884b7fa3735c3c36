// Package lua holds the Redis scripts behind every redlimit decision.
//
// Each decision script is the shared prelude (prelude.lua: the clock and the
// cost) followed by one algorithm's body, which reads its own ARGV from
// ARGV[3] on. Every script replies with an array of integers. The scripts
// are plain text; package core runs them with EVALSHA. This package uses the
// standard library only and exports nothing that can be reassigned.
package lua

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// Decision returns the decision script of the algorithm whose body is in
// name.lua: the prelude followed by the body. It panics if there is no such
// file, a programming error found by the first test that uses it.
func Decision(name string) string {
	return read("prelude") + read(name)
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
