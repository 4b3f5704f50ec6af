#!/usr/bin/env bash
# harness/until-decided.sh [--max-runs N] [--out DIR] [--rdmaprobe BIN] -- A-COMMAND... -- B-COMMAND...
#
# Runs two commands (two builds of rdmaprobe, two rdma-core installs, two settings) alternately,
# A B, then B A, A B ... (so a drift of the machine falls on both sides alike), and after 3, 4,
# ... N runs per side (default N = 8) asks `rdmaprobe compare --until-decided N` whether every
# row that counts is decided: a regression, an improvement, or shown within its threshold. It
# stops at the first look that decides, or when the budget of N runs per side is spent. The rule
# (a group-sequential one: the 5 % a false alarm may take spent over the looks by a Lan-DeMets
# function of Pocock's shape, Bonferroni over the looks) is compare's; see docs/ci-recipe.md.
#
# Each command writes one result per run: `{json}` in it is replaced by a result file's path
# (`rdmaprobe lat ... --json {json}`), `{dir}` by a directory whose results.json is the result
# (`rdmaprobe suite ... --out {dir}`). COMPARE_ARGS (environment) go to every compare, e.g.
# COMPARE_ARGS="--metric p50 --threshold 5".
#
# Output in DIR (default $RDMAPROBE_WORK/until-decided, /var/tmp/rdmaprobe-work/...): a-I, b-I
# (each run's result and log), look-K.txt (each look's compare), compare.txt (the last look's),
# compare.md. Exit status: 0 decided, no regression; 1 regression; 2 not comparable or bad
# arguments; 3 a run failed; 4 the budget spent with rows undecided (no regression).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: $0 [--max-runs N] [--out DIR] [--rdmaprobe BIN] -- A-COMMAND... -- B-COMMAND..."
max=8
out=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/until-decided
bin=
while (($#)) && [[ $1 != -- ]]; do
  case $1 in
    --max-runs) [[ ${2:-} =~ ^[0-9]+$ ]] && ((10#$2 >= 3 && 10#$2 <= 1000)) || { echo "--max-runs: 3 to 1000; $usage" >&2; exit 2; }
      max=$((10#$2)); shift 2;;
    --out) [[ -n ${2:-} ]] || { echo "--out: a directory; $usage" >&2; exit 2; }
      out=$2; shift 2;;
    --rdmaprobe) [[ -x ${2:-} ]] || { echo "--rdmaprobe: an executable; $usage" >&2; exit 2; }
      bin=$2; shift 2;;
    *) echo "unknown option $1; $usage" >&2; exit 2;;
  esac
done
(($#)) || { echo "$usage" >&2; exit 2; }
shift
a=() b=()
while (($#)) && [[ $1 != -- ]]; do a+=("$1"); shift; done
(($#)) || { echo "no B command (a second --); $usage" >&2; exit 2; }
shift
b=("$@")
((${#a[@]} && ${#b[@]})) || { echo "an A and a B command are needed; $usage" >&2; exit 2; }
names_result() { [[ "$*" == *"{json}"* || "$*" == *"{dir}"* ]]; }
names_result "${a[@]}" || { echo "the A command names no {json} or {dir} for its result; $usage" >&2; exit 2; }
names_result "${b[@]}" || { echo "the B command names no {json} or {dir} for its result; $usage" >&2; exit 2; }
if [[ -z $bin ]]; then
  cargo build --release --quiet --manifest-path "$repo/Cargo.toml" --bin rdmaprobe
  bin=$repo/target/release/rdmaprobe
fi
read -r -a cargs <<<"${COMPARE_ARGS:-}"
# the output directory is emptied only when this script made it (its marker), never a user's
if [[ -e $out && ! -f $out/.until-decided && -n $(ls -A "$out" 2>/dev/null) ]]; then
  echo "until-decided: $out exists, is not empty and was not made by this script: give another --out" >&2
  exit 2
fi
rm -rf "$out" && mkdir -p "$out" && touch "$out/.until-decided"

run() { # side index: runs the side's command once, its result at $out/side-index(.json)
  local side=$1 i=$2 res="$out/$1-$2" word
  declare -n cmd=$side
  local argv=()
  for word in "${cmd[@]}"; do
    word=${word//\{json\}/"$res.json"}
    argv+=("${word//\{dir\}/"$res"}")
  done
  if ! "${argv[@]}" >"$res.log" 2>&1; then
    tail -n 20 "$res.log" >&2
    echo "until-decided: run $i of ${side^^} failed: ${argv[*]} (log $res.log)" >&2
    exit 3
  fi
  if [[ -f $res/results.json ]]; then
    echo "$res/results.json" >>"$out/$side.files"
  elif [[ -f $res.json ]]; then
    echo "$res.json" >>"$out/$side.files"
  else
    echo "until-decided: run $i of ${side^^} wrote no result ($res.json or $res/results.json)" >&2
    exit 3
  fi
}

echo "== until decided: A: ${a[*]}"
echo "==                B: ${b[*]}"
echo "== at most $max runs per side, alternated (A B, B A, ...); looks from 3 runs per side"
rc=3
for i in $(seq 1 "$max"); do
  if ((i % 2)); then run a "$i"; run b "$i"; else run b "$i"; run a "$i"; fi
  ((i >= 3)) || continue
  mapfile -t af <"$out/a.files"
  mapfile -t bf <"$out/b.files"
  rc=0
  "$bin" compare --until-decided "$max" "${cargs[@]}" --base "${af[@]}" --new "${bf[@]}" >"$out/look-$((i - 2)).txt" \
    2>"$out/look-$((i - 2)).err" || rc=$?
  line=$(tail -n 1 "$out/look-$((i - 2)).txt")
  echo "   $i runs per side: compare exit $rc: ${line#verdict: }"
  ((rc == 3)) || break
done
cp "$out/look-$((i - 2)).txt" "$out/compare.txt"
"$bin" compare --until-decided "$max" --format markdown "${cargs[@]}" --base "${af[@]}" --new "${bf[@]}" \
  >"$out/compare.md" || true
cat "$out/compare.txt"
case $rc in
  0) echo "== decided after $i runs per side: no regression";;
  1) echo "== decided after $i runs per side: REGRESSION";;
  3) echo "== UNDECIDED after $i runs per side (the budget): rows listed above as undecided"; rc=4;;
  *) cat "$out/look-$((i - 2)).err" >&2; echo "== compare could not compare (exit $rc): $out/compare.txt" >&2;;
esac
echo "== written: $out/{a-*,b-*,look-*.txt,compare.txt,compare.md}"
exit "$rc"
