#!/bin/sh
# abrun.sh runs cmd/compare against two checkouts of redlimit, old and new,
# alternated, and prints the medians of each row in each cell side by side.
#
#	bench/cmd/compare/abrun.sh [-n rounds] [-o dir] OLD NEW [compare flags]
#	bench/cmd/compare/abrun.sh -n 3 -o /tmp/ab ../redlimit-v1 . -only=core,ulule -duration=2s
#
# OLD and NEW are the root directories of two redlimit checkouts (where
# redlimit's go.mod is). The compare program is this one (the bench/ that
# holds this script), built twice in a temporary copy of bench/ whose
# go.mod replaces github.com/redlimit/redlimit by OLD, then by NEW: the
# same harness measures both, so it must compile against both.
#
# Each round runs both builds once (-rounds=1, with the flags given), old
# first in odd rounds and new first in even ones; each run starts its own
# redis-server. The outputs go to dir (default: a new temporary directory):
# old.txt and new.txt (each run's tables), old.tsv and new.tsv (every
# measurement, from -tsv), ab.txt (the side-by-side table, printed at the
# end too; `go run ./cmd/compare -ab=dir/old.tsv,dir/new.tsv -markdown`
# prints it again as Markdown).
set -eu

usage() {
	echo "usage: $0 [-n rounds] [-o dir] OLD NEW [compare flags]" >&2
	exit 2
}

n=3
out=""
while getopts n:o: opt; do
	case $opt in
	n) n=$OPTARG ;;
	o) out=$OPTARG ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 2 ] || usage
case $n in '' | *[!0-9]* | 0) echo "$0: -n must be a positive number" >&2 && exit 2 ;; esac

old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
shift 2
for root in "$old" "$new"; do
	if ! grep -q '^module github.com/redlimit/redlimit$' "$root/go.mod" 2>/dev/null; then
		echo "$0: $root is not the root of a redlimit checkout (no go.mod of github.com/redlimit/redlimit)" >&2
		exit 2
	fi
done
bench=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$out" ]; then
	out=$(mktemp -d)
fi
mkdir -p "$out"
rm -f "$out/old.txt" "$out/new.txt" "$out/old.tsv" "$out/new.tsv" "$out/ab.txt"

# describe prints what a checkout is: its commit, and whether it has
# uncommitted changes.
describe() {
	if rev=$(git -C "$1" rev-parse --short HEAD 2>/dev/null); then
		if [ -n "$(git -C "$1" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
			rev="$rev, with uncommitted changes"
		fi
		echo "$1 (commit $rev)"
	else
		echo "$1 (not a git checkout)"
	fi
}

cp -R "$bench" "$tmp/src"
for side in old new; do
	eval root=\$$side
	(
		cd "$tmp/src"
		go mod edit -replace "github.com/redlimit/redlimit=$root"
		GOWORK=off GOFLAGS=-mod=mod go build -o "$tmp/compare-$side" ./cmd/compare
		echo "$side: $(describe "$root"); $(GOWORK=off GOFLAGS=-mod=mod go list -m github.com/redis/go-redis/v9)"
	) | tee -a "$out/$side.txt"
done

status=0
i=1
while [ "$i" -le "$n" ]; do
	order="old new"
	[ $((i % 2)) -eq 0 ] && order="new old"
	for side in $order; do
		echo "round $i of $n: $side" >&2
		echo "== round $i of $n, $side" >>"$out/$side.txt"
		if ! "$tmp/compare-$side" -q -rounds=1 -tsv="$out/$side.tsv" "$@" >>"$out/$side.txt" 2>&1; then
			echo "$0: round $i, $side: compare failed; see $out/$side.txt" >&2
			status=1
		fi
	done
	i=$((i + 1))
done

"$tmp/compare-new" -ab="$out/old.tsv,$out/new.tsv" | tee "$out/ab.txt"
echo "outputs in $out" >&2
exit $status
