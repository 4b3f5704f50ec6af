#!/usr/bin/env bash
# harness/regression-trials.sh [--trials T] [--spin N] [--max-runs M] [--scenario post-cost|lat] [--same-build] [--only identical|slowed]
#
# The false-alarm and detection rates of runs until decided against a real libmlx5 change, on
# model0. Builds rdma-core 56.1 three times from Debian's source (harness/rdma-core-56.sh,
# cached): as it is, with --spin 0 (the same source built again: the patch adds no instruction)
# and with --spin N (N dependent additions at the entry of mlx5_post_send and
# mlx5_send_wr_complete), and rdmaprobe against each. Then T trials of the two identical builds
# (plain against spin 0: every regression verdict is a false alarm) and T trials of plain against
# spin N (every regression verdict a detection), each trial harness/until-decided.sh with at
# most M runs per side (default 8) of the scenario:
#   post-cost: rdmaprobe post-cost -d model0 --op write -l 1 -n 1000 (verbs, wr, direct; p50)
#   lat:       rdmaprobe lat write --loopback -d model0 -s 8 -n 20000 (p50)
# COMPARE_ARGS default "--metric p50 --threshold 2" (a threshold below the change to find: the
# rule's significance, not the threshold, keeps the false alarms). Prints each trial's exit and
# runs per side, then the rates. --same-build: the identical trials run the plain build on both
# sides (no second build: CI's smaller version); --only runs one kind's trials. Exit 0 when the trials ran (the rates are the result), 3 when a
# build or a run failed.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
trials=20 spin=6 max=8 scenario=post-cost same=0 only=
while (($#)); do
  case $1 in
    --trials) trials=${2:-}; shift $(($# > 1 ? 2 : 1));;
    --spin) spin=${2:-}; shift $(($# > 1 ? 2 : 1));;
    --max-runs) max=${2:-}; shift $(($# > 1 ? 2 : 1));;
    --scenario) scenario=${2:-}; shift $(($# > 1 ? 2 : 1));;
    --same-build) same=1; shift;;
    --only) only=${2:-}; shift $(($# > 1 ? 2 : 1));;
    *) echo "usage: $0 [--trials T] [--spin N] [--max-runs M] [--scenario post-cost|lat] [--same-build] [--only identical|slowed]" >&2; exit 2;;
  esac
done
kinds=(identical slowed)
case $only in
  "") ;;
  identical|slowed) kinds=("$only");;
  *) echo "--only: identical or slowed" >&2; exit 2;;
esac
[[ $trials =~ ^[1-9][0-9]*$ && $spin =~ ^[1-9][0-9]*$ && $max =~ ^[1-9][0-9]*$ ]] || { echo "T, N: positive integers; M: 3 to 1000" >&2; exit 2; }
((max >= 3 && max <= 1000)) || { echo "--max-runs: 3 to 1000" >&2; exit 2; }
case $scenario in
  post-cost) cmd=(post-cost -d model0 --op write -l 1 -n 1000 --json '{json}');;
  lat) cmd=(lat write --loopback -d model0 -s 8 -n 20000 --json '{json}');;
  *) echo "--scenario: post-cost or lat" >&2; exit 2;;
esac
export COMPARE_ARGS=${COMPARE_ARGS:---metric p50 --threshold 2}
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/regression-trials
mkdir -p "$work"
"$repo/harness/setup.sh" >/dev/null
bins=()
variants=("" "--spin 0" "--spin $spin")
((same)) && variants=("" "--spin $spin")
for v in "${variants[@]}"; do
  # shellcheck disable=SC2086
  prefix=$("$repo/harness/rdma-core-56.sh" $v) || { echo "regression-trials: rdma-core 56.1 $v failed" >&2; exit 3; }
  name=$(basename "$prefix")
  # compare-rdma-core.sh's target directory: only rdmaprobe itself is rebuilt per prefix
  RDMAPROBE_RDMA_CORE_PREFIX=$prefix CARGO_TARGET_DIR="$work/../compare-rdma-core/target" \
    cargo build --release --quiet --manifest-path "$repo/Cargo.toml" --bin rdmaprobe ||
    { echo "regression-trials: the build against $prefix failed" >&2; exit 3; }
  cp "$work/../compare-rdma-core/target/release/rdmaprobe" "$work/rdmaprobe-$name"
  bins+=("$work/rdmaprobe-$name")
done
plain=${bins[0]} again=${bins[1]} slowed=${bins[-1]}
((same)) && again=$plain
say "regression-trials: $trials trials each, $scenario, at most $max runs per side, COMPARE_ARGS=$COMPARE_ARGS"
declare -A tally
for kind in "${kinds[@]}"; do
  other=$again
  [[ $kind == slowed ]] && other=$slowed
  for t in $(seq 1 "$trials"); do
    rc=0
    # this script's own trial directory (an earlier run's, perhaps of an older until-decided.sh)
    rm -rf "$work/$kind-$t"
    "$repo/harness/until-decided.sh" --max-runs "$max" --rdmaprobe "$plain" --out "$work/$kind-$t" \
      -- "$plain" "${cmd[@]}" -- "$other" "${cmd[@]}" >"$work/$kind-$t.log" 2>&1 || rc=$?
    ((rc != 3 && rc != 2)) || { tail -n 20 "$work/$kind-$t.log" >&2; echo "regression-trials: trial $t failed" >&2; exit 3; }
    used=$(ls "$work/$kind-$t"/a-*.json | wc -l)
    echo "   $kind trial $t: exit $rc after $used runs per side"
    tally[$kind-$rc]=$((${tally[$kind-$rc]:-0} + 1))
    tally[$kind-runs]=$((${tally[$kind-runs]:-0} + used))
  done
done
for kind in "${kinds[@]}"; do
  LC_ALL=C printf '%-10s %2d trials: %2d regression, %2d decided same, %2d undecided at %d runs; %.1f runs per side on average\n' \
    "$kind" "$trials" "${tally[$kind-1]:-0}" "${tally[$kind-0]:-0}" "${tally[$kind-4]:-0}" "$max" \
    "$(awk -v a="${tally[$kind-runs]}" -v b="$trials" 'BEGIN{print a / b}')"
done
