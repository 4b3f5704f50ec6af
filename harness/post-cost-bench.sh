#!/usr/bin/env bash
# harness/post-cost-bench.sh [--runs N]
#
# `cargo bench --bench post_cost` N times in a row (default 3), every run's output printed whole
# (the direct path beside its store floor, every case, and the steps from the bench to what
# `rdmaprobe post-cost` measures), then each run's target line again, one under the other.
# Exit 0 when every run met both targets, 1 when a run missed one. Results also in
# $RDMAPROBE_WORK/post-cost-bench/run-I.txt.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
runs=3
while (($#)); do
  case $1 in
    --runs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--runs: a positive integer"; runs=$2; shift 2;;
    *) die "unknown option $1 (usage: $0 [--runs N])";;
  esac
done
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
cargo bench --bench post_cost --no-run --quiet
out=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/post-cost-bench
rm -rf "$out" && mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  say "run $i of $runs"
  cargo bench --quiet --bench post_cost >"$out/run-$i.txt" 2>&1 || { cat "$out/run-$i.txt" >&2; die "bench run $i failed"; }
  cat "$out/run-$i.txt"
done
echo
echo "targets, run by run:"
met=0
for i in $(seq 1 "$runs"); do
  line=$(grep '^targets:' "$out/run-$i.txt") || die "run $i printed no target line"
  echo "  run $i: ${line#targets: }"
  [[ $line == *"NOT met"* ]] || met=$((met + 1))
done
echo "$met of $runs runs met both targets"
((met == runs))
