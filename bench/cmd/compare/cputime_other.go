//go:build !unix

package main

import "time"

// processCPU returns -1: the CPU time column needs getrusage.
func processCPU() time.Duration { return -1 }
