#!/usr/bin/env bash
# harness/perftest-peer.sh [--rounds N] [--iters N] [--size B]
#
# rdmaprobe on one end, an unmodified perftest on the other (issue 23): `rdmaprobe lat write
# --peer perftest` against `ib_write_lat`, on model0 (perftest run under `rdmaprobe model0
# exec`), every backend (verbs, wr, direct: one per perftest run, a perftest server serves one
# connection), each tool the server in turn, N rounds (default 3). Both tools time the same
# ping-pong, each from its own end; the script prints, per run, perftest's t_typical and t_avg
# (from its own output) beside rdmaprobe's figures of perftest's definition of the same run
# (perftest_ns: from each post to the next) and rdmaprobe's own p50 (post to completion), all
# one-way ns, and the ratio rdmaprobe/perftest of the typical figures: median [range] per case.
# rdmaprobe pins its client to the first CPU and its server to the last; perftest runs on the
# other one (taskset).
# Work files: $RDMAPROBE_WORK/perftest-peer (default /var/tmp/rdmaprobe-work).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 iters=5000 size=8
while (($#)); do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer"; rounds=$2; shift 2;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] && (($2 >= 2)) || die "--iters: an integer of 2 or more"; iters=$2; shift 2;;
    --size) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--size: a positive integer (bytes)"; size=$2; shift 2;;
    *) die "unknown option $1 (usage: $0 [--rounds N] [--iters N] [--size B])";;
  esac
done
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
command -v ib_write_lat >/dev/null || die "perftest is not installed (harness/setup.sh installs it)"
cargo build --release --quiet --bin rdmaprobe -p rdmaprobe
cargo build --release --quiet -p rdmaprobe-preload
bin="$repo/target/release/rdmaprobe"
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/perftest-peer
rm -rf "$work" && mkdir -p "$work"
export RDMAPROBE_MODEL_DIR="$work/model"
mkdir -m 0700 -p "$RDMAPROBE_MODEL_DIR"
port=$((20000 + RANDOM % 20000))
last=$(($(nproc) - 1))

# one run: run NAME RDMAPROBE-SERVES(0|1) BACKEND
run() {
  local name=$1 serves=$2 backend=$3
  port=$((port + 1))
  local rp=("$bin" lat write --peer perftest -d model0 -s "$size" -n "$iters" -p "$port" --backend "$backend"
    --json "$work/$name.json")
  local pt=("$bin" model0 exec -- taskset -c "$([[ $serves == 1 ]] && echo 0 || echo "$last")" ib_write_lat -d model0
    -s "$size" -n "$iters" -p "$port")
  local s c
  if ((serves)); then s=("${rp[@]}") c=("${pt[@]}" 127.0.0.1); else s=("${pt[@]}") c=("${rp[@]}" 127.0.0.1); fi
  timeout 120 "${s[@]}" >"$work/$name.server" 2>&1 &
  local spid=$! ok=0
  for _try in $(seq 50); do
    if ss -ltn | grep -q ":$port "; then break; fi
    sleep 0.1
  done
  timeout 120 "${c[@]}" >"$work/$name.client" 2>&1 && ok=1
  wait "$spid" || ok=0
  ((ok)) || { cat "$work/$name.server" "$work/$name.client" >&2; die "$name failed"; }
  local ptout=$work/$name.client
  ((serves)) || ptout=$work/$name.server
  # perftest's t_typical t_avg (ns), then rdmaprobe's perftest_ns typical, avg and its p50
  local ptf rpf
  ptf=$(awk '/t_typical/ {h=1; next} h && $1 ~ /^[0-9]+$/ {printf "%.1f %.1f", $5 * 1000, $6 * 1000; exit}' "$ptout")
  rpf=$(python3 -c 'import json,sys; x=json.load(open(sys.argv[1]))["runs"][0]; p=x["perftest_ns"]; print("%.1f %.1f %.1f" % (p["typical"], p["avg"], x["latency_ns"]["p50"]))' "$work/$name.json")
  echo "$backend $serves $ptf $rpf" >>"$work/figures"
}

echo "rdmaprobe lat write --peer perftest against ib_write_lat, model0, $size B, -n $iters, $rounds round(s)"
echo "perftest: $(dpkg-query -W -f='${Version}' perftest 2>/dev/null || echo '?'); CPUs: $(nproc)"
for r in $(seq "$rounds"); do
  for backend in verbs wr direct; do
    for serves in 1 0; do run "r$r-$backend-$serves" "$serves" "$backend"; done
  done
done
python3 - "$work/figures" <<'EOF'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
print(f"{'backend':8} {'rdmaprobe is':13} {'perftest t_typical/t_avg':>25} {'rdmaprobe same def.':>20} {'rdmaprobe p50':>14}  ratio typical: each round; median [range]")
for b in ("verbs", "wr", "direct"):
    for s in ("1", "0"):
        rs = [r for r in rows if r[0] == b and r[1] == s]
        ratios = [float(r[4]) / float(r[2]) for r in rs]
        last = rs[-1]
        print(f"{b:8} {'the server' if s == '1' else 'the client':13} {last[2] + '/' + last[3]:>25} {last[4] + '/' + last[5]:>20} {last[6]:>14}  "
              + " ".join(f"{x:.3f}" for x in ratios) + f"; {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")
print("(ns, one-way; figures of the last round; the ratio is rdmaprobe's perftest_ns.typical over perftest's t_typical of the same run)")
EOF
