// Package harness holds what the bench module's programs, cmd/compare and
// cmd/rls, share: a latency histogram, a private redis-server started on a
// free loopback port, and the helpers that format their reports.
package harness
