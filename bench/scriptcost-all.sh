#!/bin/sh
# scriptcost-all.sh prints cmd/scriptcost's table (the instructions
# redis-server spends on one script call, counted by callgrind, for every
# algorithm and the common shapes of a call) for one or more checkouts of
# redlimit, a column each.
#
#	bench/scriptcost-all.sh [-n N] [-k KEYS] [-r ROWS] [CHECKOUT...]
#	bench/scriptcost-all.sh /work/old .      # before and after
#
# -n, -k and -r are cmd/scriptcost's -n, -keys and -rows (defaults 400 and
# 600: about 4 minutes a column; the counts move by about 1 % from those of
# larger runs). A CHECKOUT is the root of a redlimit checkout (default: the one that
# holds this script). cmd/scriptcost is built against each, in a temporary
# copy of bench/ whose go.mod replaces github.com/redlimit/redlimit by the
# checkout (as cmd/compare/abrun.sh does), so each column's calls are laid
# out in its own version's wire format. The checkouts run two at a time.
# Needs valgrind and redis-server.
set -eu

n=400
keys=600
rows=""
while getopts n:k:r: opt; do
	case $opt in
	n) n=$OPTARG ;;
	k) keys=$OPTARG ;;
	r) rows=$OPTARG ;;
	*) echo "usage: $0 [-n N] [-k KEYS] [-r ROWS] [CHECKOUT...]" >&2 && exit 2 ;;
	esac
done
shift $((OPTIND - 1))
bench=$(cd "$(dirname "$0")" && pwd)
[ $# -gt 0 ] || set -- "$bench/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -R "$bench" "$tmp/src"

i=0
for root in "$@"; do
	i=$((i + 1))
	root=$(cd "$root" && pwd)
	if ! grep -q '^module github.com/redlimit/redlimit$' "$root/go.mod" 2>/dev/null; then
		echo "$0: $root is not the root of a redlimit checkout" >&2
		exit 2
	fi
	(
		cd "$tmp/src"
		go mod edit -replace "github.com/redlimit/redlimit=$root"
		GOWORK=off GOFLAGS=-mod=mod go build -o "$tmp/scriptcost-$i" ./cmd/scriptcost
		go mod edit -dropreplace github.com/redlimit/redlimit
	)
	rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "?")
	[ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+"
	echo "$rev" >"$tmp/head-$i"
done

# Two at a time: callgrind runs one thread.
j=1
while [ $j -le $i ]; do
	"$tmp/scriptcost-$j" -n "$n" -keys "$keys" -rows "$rows" >"$tmp/out-$j" &
	if [ $((j + 1)) -le $i ]; then
		"$tmp/scriptcost-$((j + 1))" -n "$n" -keys "$keys" -rows "$rows" >"$tmp/out-$((j + 1))" &
	fi
	wait
	j=$((j + 2))
done

# One line per row: its name, then each checkout's count.
{
	printf 'row'
	for k in $(seq 1 $i); do printf '\t%s' "$(cat "$tmp/head-$k")"; done
	printf '\n'
	cut -f1 "$tmp/out-1"
} | awk -F'\t' -v n="$i" -v dir="$tmp" '
	NR == 1 { print; next }
	{ line = $1
	  for (k = 1; k <= n; k++) {
		v = "-"
		f = dir "/out-" k
		while ((getline l < f) > 0) { split(l, a, "\t"); if (a[1] == $1) { v = a[2]; break } }
		close(f)
		line = line "\t" v
	  }
	  print line }'
