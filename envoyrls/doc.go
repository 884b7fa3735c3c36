// Package envoyrls serves Envoy's rate limit service API
// (envoy.service.ratelimit.v3, ShouldRateLimit) on redlimit's engine, with
// the configuration format of the reference server, envoyproxy/ratelimit.
//
// Envoy's rate limit filter (HTTP or network) sends a domain and a list of
// descriptors, each a list of key/value entries; the configuration maps
// them to limits:
//
//	domain: api
//	descriptors:
//	  - key: remote_address
//	    rate_limit:
//	      unit: minute
//	      requests_per_unit: 100
//
// A Server looks each descriptor up as the reference server does and
// decides it under its own key, one atomic script on Redis, shared by any
// number of Server instances: counts stay exact under any concurrency.
// A request of several descriptors is several decisions, sent together;
// when one denies it, what the others charged is refunded
// (Options.ChargeDenied keeps it, as the reference server does).
// Limits are fixed windows of the unit unless a rate_limit block says
// otherwise with redlimit's extensions: algorithm (gcra, token_bucket,
// leaky_bucket, sliding_window, sliding_log), burst, buckets, calendar (a
// day, week or month of the calendar in a time zone) and debt (charge
// hits_addend in full, after the fact, as tokens counted at the end of a
// stream are). docs/envoy.md in the repository shows Envoy's side, the
// migration from the reference server and every extension.
//
// Options.Reference answers as the reference server does instead: its
// windows of the Unix epoch, denied hits counted, its rate-limit fields
// and errors (redlimit-rls's REDLIMIT_COMPAT=reference).
//
// The program cmd/redlimit-rls serves a Server over gRPC, with
// /healthcheck, /metrics and /json over HTTP, configured by the
// reference server's environment variables.
package envoyrls
