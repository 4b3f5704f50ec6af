#!/usr/bin/env bash
# harness/test.sh: the whole test suite, as CI runs it. Installs what it needs (harness/setup.sh),
# then: formatting, clippy (-D warnings), the no_std core build, every host test, the device
# tests on model0 through libibverbs + libmlx5, ibverbs-utils and perftest on the preloadable
# model0 (tests/preload.rs), the rdma-core comparison on model0 (rdma-core 44
# against 56.1 built from source: harness/rdma-core-56.sh, harness/compare-rdma-core.sh), the
# regression lane (56.1 with a deliberate cost on libmlx5's send path found by runs until decided,
# the plain build against itself not flagged: harness/regression-trials.sh), and
# the Soft-RoCE lane (device tests on rxe0 in a qemu guest, harness/softroce.sh).
#   RDMAPROBE_SKIP_SOFTROCE=1 skips the guest lane (and says so).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$repo"

"$repo/harness/setup.sh" --softroce --cross --browser --fleet

say "cargo fmt --check"
cargo fmt --all -- --check || die "cargo fmt: run 'cargo fmt'"
say "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings
say "cargo clippy -p rdmaprobe-preload -- -D warnings (the preloadable model0, librdmaprobe_model0.so)"
cargo clippy -p rdmaprobe-preload -- -D warnings
say "sizes: no file in src/ over 800 lines before its tests, no function over 100, the measurement path's over 60 (harness/sizes.py)"
python3 harness/sizes.py || die "harness/sizes.py: split what it names by job (docs/architecture.md says where things go)"
say "no_std core: cargo build --lib --no-default-features"
cargo build --lib --no-default-features
cargo clippy --lib --no-default-features -- -D warnings

say "aarch64: cargo clippy --target aarch64-unknown-linux-gnu --lib (core and std)"
if rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu ||
   rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1; then
  cargo clippy --target aarch64-unknown-linux-gnu --lib --no-default-features -- -D warnings
  cargo clippy --target aarch64-unknown-linux-gnu --lib -- -D warnings
else
  say "aarch64 check SKIPPED: the aarch64-unknown-linux-gnu target could not be installed here"
fi

say "host tests: cargo test (tests/preload.rs among them: ibverbs-utils and perftest under rdmaprobe model0 exec; CI set, so a program it needs that is missing fails)"
# tests/pdf.rs and tests/preload.rs skip a test whose program is missing only where CI is unset;
# setup.sh has installed every one, so here a missing one is a failure
export CI="${CI:-true}"
host_log=$(mktemp)
trap 'rm -f "$host_log"' EXIT
cargo test 2>&1 | tee "$host_log"
status=${PIPESTATUS[0]}
((status == 0)) || die "cargo test"
say "examples: cargo build --examples; examples/plan.rs runs a plan through the library on model0"
cargo build --examples
ex_out=$(cargo run --quiet --example plan -- model0) || die "example plan failed"
echo "$ex_out"
grep -qE "^ direct: p50 [0-9.]+ ns" <<<"$ex_out" || die "example plan printed no direct figure"
ex_out=$(cargo run --quiet --example instrument -- model0) || die "example instrument failed"
echo "$ex_out"
grep -qE "^ +p99: +[0-9.]+ ns" <<<"$ex_out" || die "example instrument printed no p99"
say "docs: RUSTDOCFLAGS=-D warnings cargo doc --no-deps"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet || die "cargo doc"
say "device tests on model0 through libibverbs + libmlx5 (the same tests the guest runs on rxe0)"
RDMAPROBE_TEST_DEVICE=model0 cargo test --test device -- --ignored 2>&1 | tee -a "$host_log"
status=${PIPESTATUS[0]}
((status == 0)) || die "device tests on model0"
say "perftest beside rdmaprobe on model0 (harness/anchors.sh --short): ratios printed, not yet checked (docs/model0-exec.md)"
"$repo/harness/anchors.sh" --short || die "harness/anchors.sh --short"
say "the doorbell trap's cost on model0 (harness/trap-cost.sh --rounds 1): figures printed"
"$repo/harness/trap-cost.sh" --rounds 1 --iters 5000 || die "harness/trap-cost.sh"
host_passed=$(sed -nE 's/^test result: ok\. ([0-9]+) passed.*/\1/p' "$host_log" | awk '{s+=$1} END {print s+0}')
host_ignored=$(sed -nE 's/^test result: .* ([0-9]+) ignored.*/\1/p' "$host_log" | awk '{s+=$1} END {print s+0}')

say "rdma-core comparison lane: harness/compare-rdma-core.sh, rdma-core 44 (the system's) against 56.1 on model0"
# The second install: rdma-core 56.1 built from Debian trixie's source into a prefix (cached in
# the work directory). Both builds run the three backends on model0, verbs and wr through their
# own libmlx5 (44 and 56.1), direct as the control that does not change; 3 runs per side,
# alternated, with a BASE-against-BASE control.
second=$("$repo/harness/rdma-core-56.sh") || die "building rdma-core 56.1 (harness/rdma-core-56.sh)"
cmp_log=$(mktemp)
set +e
"$repo/harness/compare-rdma-core.sh" system "$second" --runs 3 >"$cmp_log" 2>&1
cmp_rc=$?
set -e
cat "$cmp_log"
((cmp_rc == 0 || cmp_rc == 1)) || die "compare-rdma-core.sh exited $cmp_rc (no verdict)"
grep -q "libibverbs_loaded.*$second/lib/libibverbs.so.1.14.56" "$cmp_log" ||
  die "compare did not name rdma-core 56.1's libibverbs among the environment differences"
grep -q "^post_cost write verbs 8B .*postlist=8 " "$cmp_log" ||
  die "compare has no post-cost row of the verbs backend on model0"
rm -f "$cmp_log"

say "regression lane: harness/regression-trials.sh --trials 1 --spin 200 --max-runs 5 --same-build (libmlx5 56.1 with 200 dependent additions on its send path must be found; the plain build against itself must not be)"
# the counts of a kind's line: "KIND T trials: R regression, ..."
regressions() { awk -v k="$1" '$1 == k { for (i = 1; i <= NF; i++) if ($(i + 1) == "regression,") { print $i; exit } }' "$2"; }
trial_log=$(mktemp)
if ! "$repo/harness/regression-trials.sh" --trials 1 --spin 200 --max-runs 5 --same-build 2>&1 | tee "$trial_log"; then
  die "harness/regression-trials.sh (its output above)"
fi
if [[ $(regressions slowed "$trial_log") != 1 ]]; then
  tail -n 30 "${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/regression-trials/slowed-1.log" || true
  # "decided same" is a miss; undecided at 5 runs is the budget (one noisy run per side widens every
  # row's interval past the look's level): the same trial again with 8 runs per side
  if ! grep -Eq '^slowed .* 0 decided same' "$trial_log"; then
    die "a libmlx5 slowed by 200 additions per post was judged the same as the plain build"
  fi
  say "the slowed trial was undecided at 5 runs per side (its compare above): once more with 8"
  if ! "$repo/harness/regression-trials.sh" --trials 1 --spin 200 --max-runs 8 --same-build --only slowed 2>&1 | tee "$trial_log"; then
    die "harness/regression-trials.sh (its output above)"
  fi
  [[ $(regressions slowed "$trial_log") == 1 ]] || {
    tail -n 30 "${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/regression-trials/slowed-1.log" || true
    die "a libmlx5 slowed by 200 additions per post was not found"
  }
fi
if [[ $(regressions identical "$trial_log") != 0 ]]; then
  # the rule allows a false alarm in at most 5 % of trials: a second pair of trials tells a
  # broken rule from that chance (both again: about 2 x 5 %^2 at worst)
  say "the identical trial was judged a regression: two more trials"
  if ! "$repo/harness/regression-trials.sh" --trials 2 --spin 200 --max-runs 5 --same-build 2>&1 | tee "$trial_log"; then
    die "harness/regression-trials.sh (its output above)"
  fi
  [[ $(regressions identical "$trial_log") == 0 ]] || die "the same libmlx5 build judged a regression against itself again"
fi
rm -f "$trial_log"

guest_passed=0
if [[ "${RDMAPROBE_SKIP_SOFTROCE:-0}" == 1 ]]; then
  say "Soft-RoCE lane SKIPPED (RDMAPROBE_SKIP_SOFTROCE=1): the $host_ignored device tests did not run"
else
  say "Soft-RoCE lane"
  guest_log=$(mktemp)
  "$repo/harness/softroce.sh" 2>&1 | tee "$guest_log"
  status=${PIPESTATUS[0]}
  guest_passed=$(sed -nE 's/^softroce: ([0-9]+) passed.*/\1/p' "$guest_log")
  rm -f "$guest_log"
  ((status == 0)) || die "Soft-RoCE lane"
fi
echo
echo "host: $host_passed passed, 0 failed (the device tests counted once more: they ran again on model0 through libmlx5; $host_ignored ignored in the plain run: the device and ConnectX tests, and one measurement another test runs in its own process)"
echo "guest: $guest_passed passed, 0 failed (device tests on rxe0)"
echo "total: $((host_passed + guest_passed)) passed, 0 failed"
