#!/usr/bin/env bash
# harness/test.sh: the whole test suite, as CI runs it. Installs what it needs (harness/setup.sh),
# then: formatting, clippy (-D warnings), the no_std core build, every host test, and the
# Soft-RoCE lane (device tests on rxe0 in a qemu guest, harness/softroce.sh).
#   RDMAPROBE_SKIP_SOFTROCE=1 skips the guest lane (and says so).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$repo"

"$repo/harness/setup.sh" --softroce --cross --browser

say "cargo fmt --check"
cargo fmt --all -- --check || die "cargo fmt: run 'cargo fmt'"
say "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings
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

say "host tests: cargo test"
host_log=$(mktemp)
trap 'rm -f "$host_log"' EXIT
cargo test 2>&1 | tee "$host_log"
status=${PIPESTATUS[0]}
((status == 0)) || die "cargo test"
host_passed=$(sed -nE 's/^test result: ok\. ([0-9]+) passed.*/\1/p' "$host_log" | awk '{s+=$1} END {print s+0}')
host_ignored=$(sed -nE 's/^test result: .* ([0-9]+) ignored.*/\1/p' "$host_log" | awk '{s+=$1} END {print s+0}')

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
echo "host: $host_passed passed, 0 failed ($host_ignored device and ConnectX tests ignored on the host)"
echo "guest: $guest_passed passed, 0 failed (device tests on rxe0)"
echo "total: $((host_passed + guest_passed)) passed, 0 failed"
