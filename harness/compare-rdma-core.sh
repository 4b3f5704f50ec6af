#!/usr/bin/env bash
# harness/compare-rdma-core.sh BASE NEW [suite options...]
#
# Builds rdmaprobe twice from this checkout, against two rdma-core (or OFED) installs, runs
# `rdmaprobe suite --quick` with each build, and compares the two results (NEW against BASE).
# BASE and NEW are install prefixes (the directory holding include/infiniband/verbs.h and
# lib*/libibverbs.so, or usr/include and usr/lib/...), or the word `system` for the one
# pkg-config finds. Each build embeds an rpath to its prefix, so each run loads its own
# libibverbs (results.json records which: environment.libibverbs_loaded).
#
# Output in $RDMAPROBE_WORK/compare-rdma-core (default /var/tmp/rdmaprobe-work/...): base/ and
# new/ (results.json, plots, report.html of each), compare.md (markdown, for a CI summary) and
# compare.xml (JUnit). Exit status: compare's (0 no regression, 1 regression, 2 not comparable),
# or 3 when a build or a run fails.
#
# Options after NEW go to both suite runs (for example `-d mlx5_0` or `--quick` is the default;
# pass `--full` to run the whole matrix). COMPARE_ARGS (environment) go to compare, for example
# COMPARE_ARGS="--threshold 10 --metric p50,bw".
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
[[ $# -ge 2 ]] || { echo "usage: $0 BASE_PREFIX|system NEW_PREFIX|system [suite options]" >&2; exit 2; }
base=$1 new=$2
shift 2
quick=(--quick)
suite_args=()
for a in "$@"; do
  if [[ $a == --full ]]; then quick=(); else suite_args+=("$a"); fi
done
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/compare-rdma-core
mkdir -p "$work"
"$repo/harness/setup.sh" >/dev/null

build_and_run() { # name prefix
  local name=$1 prefix=$2 out="$work/$1"
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
  rm -rf "$out"
  echo "== $name: suite ${quick[*]} ${suite_args[*]}"
  if ! "$work/rdmaprobe-$name" suite "${quick[@]}" "${suite_args[@]}" --out "$out" >"$work/$name.log" 2>&1; then
    cat "$work/$name.log" >&2
    echo "compare-rdma-core: $name: suite failed (log above)" >&2
    exit 3
  fi
  grep -E '^(rdmaprobe suite|WARNING)' "$work/$name.log" || true
}

build_and_run base "$base"
build_and_run new "$new"

read -r -a cargs <<<"${COMPARE_ARGS:-}"
rc=0
"$work/rdmaprobe-new" compare "${cargs[@]}" "$work/base/results.json" "$work/new/results.json" || rc=$?
"$work/rdmaprobe-new" compare --format markdown "${cargs[@]}" \
  "$work/base/results.json" "$work/new/results.json" >"$work/compare.md" || true
"$work/rdmaprobe-new" compare --format junit "${cargs[@]}" \
  "$work/base/results.json" "$work/new/results.json" >"$work/compare.xml" || true
echo "== compare exit $rc; written: $work/{base,new,compare.md,compare.xml}"
exit "$rc"
