// Command gen writes the scripts Redis runs, lua/scripts/<name>.lua, from
// their parts in lua/src (go generate in lua/).
package main

import (
	"log"
	"os"
	"path/filepath"

	"github.com/redlimit/redlimit/lua/internal/assemble"
)

func main() {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("src", name+".lua"))
		if err != nil {
			log.Fatal(err)
		}
		return string(b)
	}
	for _, name := range append(assemble.Algorithms, assemble.All) {
		src, err := assemble.Script(name, read)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("scripts", name+".lua"), []byte(src), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
