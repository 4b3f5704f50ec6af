#!/usr/bin/env bash
# harness/perftest-newer.sh DIR
#
# rdmaprobe against a perftest built from source (issue 23: a perftest of 6.28 or later, which
# negotiates its parameters; Debian 12 ships 6.06, which does not). DIR is a perftest source
# tree (linux-rdma/perftest, e.g. a git checkout of a release); this script builds it there
# (autogen, configure, make: it installs autoconf, automake, libtool and the rdma-core
# headers), then runs, on model0 (perftest under `rdmaprobe model0 exec`), each tool the server
# in turn: lat write/send/read/atomic, lat write -a, lat send -c UD, bw write -q 2, bw read,
# bw send, bw send -a, bw write --report_gbits; each must end with both exit 0 and rdmaprobe's
# JSON saying the peer negotiated. Then five mismatches (-s, -a, -c, -n, -q), each of which both
# tools must refuse at the negotiation, rdmaprobe naming the field and the flag.
# Work files: $RDMAPROBE_WORK/perftest-newer (default /var/tmp/rdmaprobe-work).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
(($# == 1)) && [[ -f $1/configure.ac ]] || die "usage: $0 DIR (a perftest source tree: DIR/configure.ac)"
src=$(cd "$1" && pwd)
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
export DEBIAN_FRONTEND=noninteractive
if ! command -v autoreconf >/dev/null || ! dpkg -s libibumad-dev >/dev/null 2>&1; then
  apt-get update -q >/dev/null
  apt-get install -y -q autoconf automake libtool libibverbs-dev librdmacm-dev libibumad-dev libpci-dev >/dev/null
fi
say "building perftest in $src"
(cd "$src" && { [[ -x configure ]] || ./autogen.sh; } && ./configure -q && make -j"$(nproc)" -s) >/dev/null 2>&1 ||
  die "perftest did not build in $src (run its ./autogen.sh, ./configure and make there to see why)"
version=$("$src/ib_write_lat" --version 2>&1 | awk '/Version/ {print $2}' || true)
say "perftest $version"
model0_peer_work perftest-newer

# run SERVES SCEN OP BACKEND 'RDMAPROBE FLAGS' 'PERFTEST FLAGS': both ends of one run; sets rc, prc
run() {
  local serves=$1 scen=$2 op=$3 backend=$4 ours=$5 theirs=$6
  next_port
  # shellcheck disable=SC2206
  local rp=("$bin" "$scen" "$op" --peer perftest -d model0 $ours -p "$port" --backend "$backend" --stall-secs 5
    --json "$work/run.json")
  # shellcheck disable=SC2206
  local pt=("$bin" model0 exec --timeout 60 -- taskset -c "$([[ $serves == 1 ]] && echo 0 || echo "$last")"
    "$src/ib_${op}_${scen}" -d model0 $theirs -p "$port")
  local s c
  rm -f "$work/run.json"
  if ((serves)); then s=("${rp[@]}") c=("${pt[@]}" 127.0.0.1); else s=("${pt[@]}") c=("${rp[@]}" 127.0.0.1); fi
  timeout 90 "${s[@]}" >"$work/server" 2>&1 &
  local spid=$!
  for _try in $(seq 50); do
    if ss -ltn | grep -q ":$port "; then break; fi
    sleep 0.1
  done
  local cst=0 sst=0
  timeout 90 "${c[@]}" >"$work/client" 2>&1 || cst=$?
  wait "$spid" || sst=$?
  if ((serves)); then
    rc=$sst prc=$cst
    cp "$work/server" "$work/rdmaprobe.out"
  else
    rc=$cst prc=$sst
    cp "$work/client" "$work/rdmaprobe.out"
  fi
}

cases=(
  "lat write direct|-s 8 -n 1000" "lat send wr|-s 64 -n 1000" "lat read direct|-s 64 -n 1000"
  "lat atomic verbs|-n 1000" "lat write direct|-a -n 100" "lat send verbs|-c UD -s 64 -n 500"
  "bw write direct|-s 65536 -n 2000 -q 2" "bw read wr|-s 65536 -n 2000" "bw send verbs|-s 65536 -n 2000"
  "bw send direct|-a -n 50" "bw write verbs|--report_gbits -s 65536 -n 1000"
)
n=0
for serves in 0 1; do
  for c in "${cases[@]}"; do
    read -r scen op backend <<<"${c%%|*}"
    flags=${c#*|}
    run "$serves" "$scen" "$op" "$backend" "$flags" "$flags"
    what="$scen $op $flags ($backend, rdmaprobe the $([[ $serves == 1 ]] && echo server || echo client))"
    ((rc == 0 && prc == 0)) || { cat "$work/server" "$work/client" >&2; die "$what: rdmaprobe $rc, perftest $prc"; }
    neg=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["params"]["peer_tool"]["negotiated"])' \
      "$work/run.json")
    [[ $neg == True ]] || die "$what: rdmaprobe's JSON says the peer did not negotiate"
    echo "ok: $what, negotiated"
    n=$((n + 1))
  done
done
mismatches=(
  "lat write|-s 8 -n 1000|-s 64 -n 1000|size mismatch"
  "lat write|-a -n 100|-s 8 -n 100|test_method mismatch"
  "lat send|-c UD -s 8 -n 100|-s 8 -n 100|connection_type mismatch"
  "bw write|-s 65536 -n 1000|-s 65536 -n 2000|iters mismatch"
  "bw send|-s 65536 -n 1000 -q 2|-s 65536 -n 1000|num_of_qps mismatch"
)
for m in "${mismatches[@]}"; do
  IFS='|' read -r so ours theirs expect <<<"$m"
  read -r scen op <<<"$so"
  run 0 "$scen" "$op" verbs "$ours" "$theirs"
  what="$scen $op, rdmaprobe [$ours], perftest [$theirs]"
  ((rc == 1 && prc != 0)) || die "$what: rdmaprobe $rc, perftest $prc (both should refuse)"
  grep -q "$expect" "$work/rdmaprobe.out" || { cat "$work/rdmaprobe.out" >&2; die "$what: no '$expect'"; }
  echo "ok: $what: $(grep -o "$expect[^:]*:[^:]*" "$work/rdmaprobe.out" | head -1)"
  n=$((n + 1))
done
echo "perftest $version against rdmaprobe on model0: $n passed, 0 failed"
