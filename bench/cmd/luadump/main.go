// Command luadump prints one of redlimit's Redis scripts as the engine
// sends it, for measuring it outside the library (scriptcost.sh):
//
//	go run ./cmd/luadump one gcra      # the decision script of GCRA
//	go run ./cmd/luadump batch gcra    # the batch script of GCRA
//	go run ./cmd/luadump settle gcra   # the settlement script of GCRA
package main

import (
	"fmt"
	"os"

	"github.com/redlimit/redlimit/lua"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: luadump one|batch|settle ALGORITHM_FILE...")
		os.Exit(2)
	}
	files := os.Args[2:]
	switch os.Args[1] {
	case "one":
		fmt.Print(lua.Decision(files...))
	case "batch":
		fmt.Print(lua.Batch(files...))
	case "settle":
		fmt.Print(lua.Settle(files...))
	default:
		fmt.Fprintf(os.Stderr, "luadump: %q is not one, batch or settle\n", os.Args[1])
		os.Exit(2)
	}
}
