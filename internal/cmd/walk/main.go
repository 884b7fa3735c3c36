// Command walk lists the Go files of redlimit that one request through
// gin's middleware runs, from the adapter to the script and back, and the
// functions it runs in each: the walk docs/engine.md describes.
//
//	go run ./internal/cmd/walk          # an allowed request
//	go run ./internal/cmd/walk -deny    # a denied one
//	go run ./internal/cmd/walk -funcs   # the functions too
//
// It builds itself with coverage of every redlimit package, serves one
// request on miniredis with a client that has ContextTimeoutEnabled (the
// README's), counting only what that request runs (the counters are
// cleared after the set-up, which also loads the script), and reads the
// counters with go tool covdata.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	deny := flag.Bool("deny", false, "walk a request that is denied (429) rather than allowed")
	funcs := flag.Bool("funcs", false, "list the functions run in each file")
	flag.Parse()
	if os.Getenv(serveEnv) != "" {
		serve(*deny)
		return
	}
	w, err := walk(*deny)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walk:", err)
		os.Exit(1)
	}
	fmt.Printf("%d files, status %d\n", len(w.Files), w.Status)
	for _, f := range w.Files {
		fmt.Println(f.Name)
		if *funcs {
			for _, fn := range f.Funcs {
				fmt.Println("\t" + fn)
			}
		}
	}
}
