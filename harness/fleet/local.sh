#!/usr/bin/env bash
# harness/fleet/local.sh [OUT]: the fleet acceptance run on this machine alone, as the test
# does: builds rdmaprobe (release), runs harness/fleet/playbook.yml over inventory.local.yml
# (n1-n3 local "nodes" on 127.0.0.11-13 on model0, n3 slowed by model0's wire delay, n4 an ssh
# host with no sshd: unreachable), then `rdmaprobe fleet-report OUT`. OUT defaults to
# $RDMAPROBE_WORK/fleet (RDMAPROBE_WORK: /var/tmp/rdmaprobe-work). Exit status: fleet-report's
# (1 here: n3 and n4 fail, as they should), 3 when the build or the playbook cannot run.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
out=${1:-${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/fleet}
[[ $out == /* ]] || out=$PWD/$out
"$repo/harness/setup.sh" --fleet >/dev/null
say "build (release)"
cargo build --release --quiet --manifest-path "$repo/Cargo.toml" --bin rdmaprobe || { echo "build failed" >&2; exit 3; }
bin=${CARGO_TARGET_DIR:-$repo/target}/release/rdmaprobe
[[ $bin == /* ]] || bin=$repo/$bin
rm -rf "$out"
mkdir -p "$out"
say "ansible-playbook over the four-node inventory -> $out (log: $out/ansible.log)"
start=$(date +%s)
rc=0
ANSIBLE_NOCOLOR=1 ansible-playbook -i "$repo/harness/fleet/inventory.local.yml" "$repo/harness/fleet/playbook.yml" \
  -e "fleet_out=$out" -e "rdmaprobe_bin=$bin" -e "rdmaprobe_workdir=$out/nodes-work" >"$out/ansible.log" 2>&1 || rc=$?
# 4: some host unreachable (n4, by design); anything else is the playbook failing
((rc == 0 || rc == 4)) || { tail -30 "$out/ansible.log" >&2; echo "ansible-playbook exited $rc" >&2; exit 3; }
say "playbook: $(($(date +%s) - start)) s; fleet-report (--min-deviation-pct 40: three nodes share two vCPUs)"
"$bin" fleet-report "$out" --min-deviation-pct 40
