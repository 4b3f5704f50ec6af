#!/usr/bin/env bash
# harness/run.sh: the main job. Installs what it needs, builds rdmaprobe (release) and runs it:
# `rdmaprobe devices` (every RDMA device and port, or why there is none) and `rdmaprobe clock`
# (TSC rate, its source, the timed-region overhead). Extra arguments go to `devices`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
cargo build --release --quiet --bin rdmaprobe
bin="$repo/target/release/rdmaprobe"

set +e
"$bin" devices "$@"
rc=$?
set -e
case $rc in
  0) ;;
  3) echo "(no hardware RDMA device on this machine: see above)";;
  *) die "rdmaprobe devices exited $rc";;
esac
echo
"$bin" clock
