#!/usr/bin/env bash
# harness/run.sh: the main job. Installs what it needs, builds rdmaprobe (release), lists the RDMA
# devices (or says why there are none; model0 is then used), and runs the standard matrix:
# `rdmaprobe suite --quick` into ./rdmaprobe-out (results.json, latency.hlog).
#   harness/run.sh [suite options]      e.g. harness/run.sh -d mlx5_0 --out /tmp/r   (full matrix: no --quick)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
cargo build --release --quiet --bin rdmaprobe
bin="$repo/target/release/rdmaprobe"

set +e
"$bin" devices >/tmp/rdmaprobe-devices.$$ 2>&1
rc=$?
set -e
case $rc in
  0) grep -E '^hca_id|state:|link_layer:' /tmp/rdmaprobe-devices.$$ || true;;
  3) echo "No hardware RDMA device here:"; sed -n '3,3p' /tmp/rdmaprobe-devices.$$; echo "(the built-in model0 is used)";;
  *) cat /tmp/rdmaprobe-devices.$$; rm -f /tmp/rdmaprobe-devices.$$; die "rdmaprobe devices exited $rc";;
esac
rm -f /tmp/rdmaprobe-devices.$$
echo
if (($#)); then
  "$bin" suite "$@"
else
  "$bin" suite --quick --out "$repo/rdmaprobe-out"
fi
