#!/usr/bin/env bash
# harness/compare-rdma-core.sh BASE NEW [--runs N | --until-decided [--max-runs N]] [suite options...]
#
# Builds rdmaprobe twice from this checkout, against two rdma-core (or OFED) installs, runs
# `rdmaprobe suite --quick` with each build N times (default 3), alternately, with a control:
# base, new, base again (the control), N rounds; then compares NEW's N runs against BASE's and,
# as the control, BASE's second N runs against its first (same build, same install: whatever
# the control flags is the machine's noise, not the change). BASE and NEW are install prefixes
# (the directory holding include/infiniband/verbs.h and lib*/libibverbs.so, or usr/include and
# usr/lib/...), or the word `system` for the one pkg-config finds. Each build embeds an rpath
# to its prefix, so each run loads its own libibverbs (results.json records which:
# environment.libibverbs_loaded).
#
# Output in $RDMAPROBE_WORK/compare-rdma-core (default /var/tmp/rdmaprobe-work/...): base-I/,
# new-I/ and control-I/ (results.json, plots, report.html of each run), compare.md (markdown,
# for a CI summary), compare.xml (JUnit), control.md. The control's verdict is printed beside
# the real one. Exit status: the real compare's (0 no regression, 1 regression, 2 not
# comparable), or 3 when a build or a run fails. A control that finds a regression is reported
# (WARNING) but does not change the status: read the real verdict against it.
#
# With --until-decided the two builds' suite runs alternate until every row that counts is
# decided or N runs per side (--max-runs, default 8) are spent (harness/until-decided.sh: a
# group-sequential rule keeps the false-alarm rate at 5 % over the looks; no BASE-against-BASE
# control, the rule is the guard); output in $work/until-decided, exit status as that script's
# (0 no regression, 1 regression, 2 not comparable, 3 a run failed, 4 undecided at the budget).
#
# Options after NEW go to every suite run (for example `-d mlx5_0`; `--quick` is the default;
# pass `--full` to run the whole matrix). COMPARE_ARGS (environment) go to both compares, for
# example COMPARE_ARGS="--threshold 10 --metric p50,bw".
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: $0 BASE_PREFIX|system NEW_PREFIX|system [--runs N | --until-decided [--max-runs N]] [suite options]"
[[ $# -ge 2 ]] || { echo "$usage" >&2; exit 2; }
base=$1 new=$2
shift 2
quick=(--quick)
suite_args=()
runs=3
until=0
max_runs=8
while (($#)); do
  case $1 in
    --until-decided) until=1; shift;;
    --max-runs) [[ ${2:-} =~ ^[0-9]+$ ]] && ((10#$2 >= 3 && 10#$2 <= 1000)) || { echo "--max-runs: 3 to 1000; $usage" >&2; exit 2; }
      max_runs=$2; shift 2;;
    --full) quick=(); shift;;
    --runs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "--runs: a positive integer; $usage" >&2; exit 2; }
      runs=$2; shift 2;;
    *) suite_args+=("$1"); shift;;
  esac
done
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/compare-rdma-core
mkdir -p "$work"
"$repo/harness/setup.sh" >/dev/null

build() { # name prefix
  local name=$1 prefix=$2
  local env=()
  if [[ $prefix != system ]]; then
    [[ -d $prefix ]] || { echo "compare-rdma-core: $name: no directory $prefix" >&2; exit 3; }
    env=(RDMAPROBE_RDMA_CORE_PREFIX="$(cd "$prefix" && pwd)")
  fi
  echo "== $name: build against ${prefix}"
  # one target directory (only rdmaprobe itself is rebuilt: build.rs reruns when the prefix
  # changes), each binary copied out
  if ! env "${env[@]}" CARGO_TARGET_DIR="$work/target" \
      cargo build --release --quiet --manifest-path "$repo/Cargo.toml" --bin rdmaprobe; then
    echo "compare-rdma-core: $name: the build against $prefix failed" >&2
    exit 3
  fi
  cp "$work/target/release/rdmaprobe" "$work/rdmaprobe-$name"
}

suite_run() { # binary out-name
  local bin=$1 out="$work/$2"
  rm -rf "$out"
  echo "== $2: $bin suite ${quick[*]} ${suite_args[*]}"
  if ! "$work/rdmaprobe-$bin" suite "${quick[@]}" "${suite_args[@]}" --out "$out" >"$work/$2.log" 2>&1; then
    cat "$work/$2.log" >&2
    echo "compare-rdma-core: $2: suite failed (log above)" >&2
    exit 3
  fi
  grep -E '^(rdmaprobe suite|WARNING)' "$work/$2.log" || true
}

build base "$base"
build new "$new"
if ((until)); then
  rc=0
  "$repo/harness/until-decided.sh" --max-runs "$max_runs" --rdmaprobe "$work/rdmaprobe-new" --out "$work/until-decided" \
    -- "$work/rdmaprobe-base" suite "${quick[@]}" "${suite_args[@]}" --out '{dir}' \
    -- "$work/rdmaprobe-new" suite "${quick[@]}" "${suite_args[@]}" --out '{dir}' || rc=$?
  exit "$rc"
fi
rm -rf "$work"/base-* "$work"/new-* "$work"/control-*
# alternately, so a change of the machine's load falls on both sides (and the control) alike
for i in $(seq 1 "$runs"); do
  suite_run base "base-$i"
  suite_run new "new-$i"
  suite_run base "control-$i"
done

read -r -a cargs <<<"${COMPARE_ARGS:-}"
files() { for i in $(seq 1 "$runs"); do echo "$work/$1-$i/results.json"; done; }
mapfile -t bfiles < <(files base)
mapfile -t nfiles < <(files new)
mapfile -t cfiles < <(files control)
verdict() { # exit status -> words
  case $1 in 0) echo "no regression";; 1) echo "REGRESSION";; *) echo "not comparable (exit $1)";; esac
}
rows() { grep -c ' REGRESSION$' "$1" || true; }
echo "== control: BASE's runs ${runs}x against BASE's other ${runs} runs (the noise floor)"
ctl=0
# BASE against BASE differs in no library: auto uses the in-run control there too, as in the
# real compare, so its verdict is that method's noise floor
"$work/rdmaprobe-new" compare "${cargs[@]}" --base "${bfiles[@]}" --new "${cfiles[@]}" >"$work/control.txt" || ctl=$?
"$work/rdmaprobe-new" compare --format markdown "${cargs[@]}" --base "${bfiles[@]}" --new "${cfiles[@]}" \
  >"$work/control.md" || true
echo "== compare: NEW ${runs}x against BASE ${runs}x"
rc=0
"$work/rdmaprobe-new" compare "${cargs[@]}" --base "${bfiles[@]}" --new "${nfiles[@]}" | tee "$work/compare.txt" ||
  rc=${PIPESTATUS[0]}
"$work/rdmaprobe-new" compare --format markdown "${cargs[@]}" --base "${bfiles[@]}" --new "${nfiles[@]}" \
  >"$work/compare.md" || true
"$work/rdmaprobe-new" compare --format junit "${cargs[@]}" --base "${bfiles[@]}" --new "${nfiles[@]}" \
  >"$work/compare.xml" || true
echo "== verdicts, $runs runs per side, alternated:"
printf '   %-34s exit %s: %s (%s REGRESSION rows)\n' \
  "control (BASE against BASE)" "$ctl" "$(verdict "$ctl")" "$(rows "$work/control.txt")" \
  "BASE against NEW" "$rc" "$(verdict "$rc")" "$(rows "$work/compare.txt")"
if ((ctl == 1)); then
  echo "WARNING: the control (the same build twice) found a regression: the machine's noise reaches the threshold;" \
    "read the real verdict against it (control.txt), or raise --runs or --threshold"
fi
echo "== compare exit $rc; written: $work/{base-*,new-*,control-*,compare.md,compare.xml,control.md}"
exit "$rc"
