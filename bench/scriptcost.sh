#!/usr/bin/env bash
# scriptcost.sh: the instructions redis-server spends on one call of a
# script, counted by valgrind's callgrind: the same count on a busy machine
# as on an idle one, so two versions of a script can be compared exactly.
#
#   ./scriptcost.sh SCRIPT.lua NKEYS ARG...    # e.g. a GCRA decision:
#   ./scriptcost.sh ../lua/scripts/gcra.lua 1 d "" "" 0 1 0 gcra 1000 1 1000000000
#
# The scripts Redis runs are the files in lua/scripts; their ARGV is
# internal/wire's (a kind, then the call's arguments).
#
# It starts redis-server under callgrind on a free loopback port, sends
# 10 000 and then 30 000 calls from redis-benchmark (keys k{0}..k{9999}),
# and prints the difference per call, which leaves out start-up and the
# benchmark's own commands. Needs valgrind, redis-server and
# redis-benchmark (Debian: valgrind, redis-server, redis-tools). REDIS_SERVER
# picks another redis-server binary (one built with -g shows where the
# instructions go: callgrind_annotate).
set -euo pipefail
script=$1 nkeys=$2
shift 2
keys=()
for i in $(seq 1 "$nkeys"); do keys+=("k$i{__rand_int__}"); done

count() { # count CALLS ARG...: total instructions of a server that ran CALLS calls
  local calls=$1 port out pid sha
  shift
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "${REDIS_SERVER:-redis-server}" \
    --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  sha=$(redis-cli -p "$port" SCRIPT LOAD "$(cat "$script")")
  redis-benchmark -p "$port" -c 1 -n "$calls" -r 10000 -q EVALSHA "$sha" "$nkeys" "${keys[@]}" "$@" >/dev/null
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  awk '/^(summary|totals):/ {print $2; exit}' "$out"
  rm -f "$out"
}
a=$(count 10000 "$@")
b=$(count 30000 "$@")
echo "$(( (b - a) / 20000 )) instructions a call"
