#!/usr/bin/env bash
# harness/compare-calibration.sh [--trials N] [--delay D] [--duration S] [--runs R] [--out DIR]
#
# Measures, on model0, how often `rdmaprobe compare` cries wolf and how often it finds a real
# change, with its default settings, and prints the four rates issue 9 sets as targets:
#   1. identical configuration, one file per side: ordered pairs of 5 runs that exit 1 (<= 1 of 20)
#   2. identical configuration, R files per side (--runs, default 3), run alternately: trials
#      that exit 1 (0 of N)
#   3. p50 +10 % (model0's wire delay D), R files per side, alternately: trials that exit 1
#      (>= 19 of 20)
#   4. identical post-cost runs, one file per side: ordered pairs of 5 runs with a REGRESSION row
#      (0 of 20)
# Every run is `rdmaprobe lat write --loopback -d model0 -s 8 -D S --model-delay-ns D --json F`
# (S seconds, default 3: see "Why runs of seconds" below)
# (post-cost: `rdmaprobe post-cost -d model0 --json F`). D for +10 % is measured: the baseline
# p50 first (5 runs at D = 0), then 3 runs at D = 0 and 3 at D = 100 alternately for the slope
# (about 1 ns of one-way latency per ns of D); D = 10 % of the baseline p50 over the slope.
# A trial runs A A' B R times (A, A': D = 0; B: D + shift), so a change of the machine's
# load falls on every side alike.
#
# Builds release first (cargo; CARGO_TARGET_DIR is honoured). Files are kept in --out (default
# $RDMAPROBE_WORK/compare-calibration, RDMAPROBE_WORK defaulting to /var/tmp/rdmaprobe-work).
# Takes about 3 minutes at 20 trials. Exit 0 when the four targets hold, 1 when one does not,
# 2 on a usage error, 3 when a build or a run fails.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
trials=20 delay="" out="" dur=3 runs=3
while (($#)); do
  case $1 in
    --trials) trials=$2; shift 2;;
    --delay) delay=$2; shift 2;;
    --out) out=$2; shift 2;;
    --duration) dur=$2; shift 2;;
    --runs) runs=$2; shift 2;;
    *) echo "usage: $0 [--trials N] [--delay D] [--duration S] [--runs R] [--out DIR]" >&2; exit 2;;
  esac
done
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "--trials: a positive integer" >&2; exit 2; }
[[ -z $delay || $delay =~ ^[0-9]+$ ]] || { echo "--delay: ns, an integer" >&2; exit 2; }
[[ $dur =~ ^[1-9][0-9]*$ ]] || { echo "--duration: seconds, a positive integer" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "--runs: files per side, a positive integer" >&2; exit 2; }
out=${out:-${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/compare-calibration}
rm -rf "$out"
mkdir -p "$out"
command -v jq >/dev/null || { echo "compare-calibration: needs jq" >&2; exit 3; }

say "build (release)"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" --bin rdmaprobe || { echo "build failed" >&2; exit 3; }
bin=${CARGO_TARGET_DIR:-$repo/target}/release/rdmaprobe
[[ $bin == /* ]] || bin=$repo/$bin

lat() { # D FILE
  "$bin" lat write --loopback -d model0 -s 8 -D "$dur" --model-delay-ns "$1" --json "$2" >"$2.log" 2>&1 ||
    { cat "$2.log" >&2; echo "compare-calibration: lat run failed" >&2; exit 3; }
}
p50() { jq '.runs[0].latency_ns.p50 // .runs[0].latency.p50' "$@"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
# compare's exit status, 0 or 1; anything else stops the script
cmp() {
  local rc=0
  "$bin" compare "$@" >>"$out/compare.log" 2>&1 || rc=$?
  ((rc <= 1)) || { tail -5 "$out/compare.log" >&2; echo "compare-calibration: compare exited $rc" >&2; exit 3; }
  echo "$rc"
}

say "baseline: 5 runs at D = 0"
mkdir -p "$out/one"
for i in 1 2 3 4 5; do lat 0 "$out/one/r$i.json"; done
base=$(p50 "$out"/one/r*.json | median)
if [[ -z $delay ]]; then
  mkdir -p "$out/slope"
  for i in 1 2 3; do lat 0 "$out/slope/d0_$i.json"; lat 100 "$out/slope/d100_$i.json"; done
  lo=$(p50 "$out"/slope/d0_*.json | median) hi=$(p50 "$out"/slope/d100_*.json | median)
  delay=$(awk -v b="$base" -v lo="$lo" -v hi="$hi" 'BEGIN {
    s = (hi - lo) / 100; if (s < 0.25) s = 1; d = 0.10 * b / s; printf "%d", d + 0.5 }')
  say "baseline p50 $base ns; D = 100 moves p50 from $lo to $hi ns; D for +10 %: $delay ns"
fi

say "1. identical, one file per side: 20 ordered pairs of the 5 baseline runs"
one=0
for i in 1 2 3 4 5; do
  for j in 1 2 3 4 5; do
    ((i != j)) || continue
    one=$((one + $(cmp "$out/one/r$i.json" "$out/one/r$j.json")))
  done
done

say "2-3. $trials trials, each A A' B $runs times (A, A': D = 0; B: D = $delay)"
three=0 found=0
for t in $(seq 1 "$trials"); do
  d="$out/t$t"
  mkdir -p "$d"
  for i in $(seq 1 "$runs"); do lat 0 "$d/a$i.json"; lat 0 "$d/c$i.json"; lat "$delay" "$d/b$i.json"; done
  r3=$(cmp --base "$d"/a*.json --new "$d"/c*.json) rf=$(cmp --base "$d"/a*.json --new "$d"/b*.json)
  three=$((three + r3)) found=$((found + rf))
  echo "trial $t: p50 A $(p50 "$d"/a*.json | xargs printf '%.0f ') A' $(p50 "$d"/c*.json | xargs printf '%.0f ')" \
    "B $(p50 "$d"/b*.json | xargs printf '%.0f ')-> identical exit $r3, shifted exit $rf" >>"$out/trials.txt"
done
a_p50=$(p50 "$out"/t*/a*.json | median) b_p50=$(p50 "$out"/t*/b*.json | median)

say "4. identical post-cost runs: 20 ordered pairs of 5 runs"
mkdir -p "$out/post"
for i in 1 2 3 4 5; do
  "$bin" post-cost -d model0 --json "$out/post/p$i.json" >"$out/post/p$i.log" 2>&1 ||
    { cat "$out/post/p$i.log" >&2; exit 3; }
done
post=0 post_judged=0
for i in 1 2 3 4 5; do
  for j in 1 2 3 4 5; do
    ((i != j)) || continue
    o=$("$bin" compare "$out/post/p$i.json" "$out/post/p$j.json" 2>&1 || true)
    grep -q ' REGRESSION$' <<<"$o" && post=$((post + 1))
    grep -qE '^post_cost .* p50 .*\[' <<<"$o" && post_judged=$((post_judged + 1))
  done
done

shift_pct=$(awk -v a="$a_p50" -v b="$b_p50" 'BEGIN { printf "%+.1f", (b / a - 1) * 100 }')
ok() { if eval "$1"; then echo "ok"; else echo "MISSED"; fi; }
{
  echo
  echo "compare calibration on model0: $(git -C "$repo" describe --always --dirty 2>/dev/null || echo '?'), $(date -u +%FT%TZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "runs: lat write --loopback -d model0 -s 8 -D $dur --model-delay-ns D --json F (default compare settings)"
  echo "baseline p50 $base ns; shift D = $delay ns; measured p50 over the trials: A $a_p50 ns, B $b_p50 ns ($shift_pct %)"
  printf '  %-62s %6s  %-10s %s\n' \
    "1. identical, one file per side (ordered pairs exit 1)" "$one/20" "target <=1" "$(ok "((one <= 1))")" \
    "2. identical, $runs files per side, alternated (exit 1)" "$three/$trials" "target 0" "$(ok "((three == 0))")" \
    "3. p50 $shift_pct %, $runs files per side, alternated (exit 1)" "$found/$trials" "target >=95%" \
    "$(ok "((found * 20 >= 19 * trials))")" \
    "4. identical post-cost runs (pairs with a REGRESSION row)" "$post/20" "target 0" "$(ok "((post == 0))")"
  echo "  (post-cost p50 rows with an interval: $post_judged of 20 pairs; none means the files carry no block_per_wqe_ns)"
  echo "trials (p50 of each run, ns):"
  sed 's/^/  /' "$out/trials.txt"
  echo "files: $out"
} | tee "$out/summary.txt"
((one <= 1 && three == 0 && found * 20 >= 19 * trials && post == 0))
