//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time this process has used so
// far, all its threads together (getrusage RUSAGE_SELF), or -1 if the
// system does not say. A redis-server started by the program is another
// process, so its time is not included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
