#!/usr/bin/env bash
# harness/perftest-peer.sh [--rounds N] [--iters N] [--size B] [--ops LIST]
#
# rdmaprobe on one end, an unmodified perftest on the other (issue 23): `rdmaprobe lat OP --peer
# perftest` against `ib_OP_lat` and `rdmaprobe bw OP --peer perftest` against `ib_OP_bw`, OP in
# LIST (default write,send,read,atomic,bw-write,bw-read,bw-send; bw at 64 KiB), on model0 (perftest
# run under `rdmaprobe model0 exec`), every backend (verbs, wr, direct: one per perftest run, a
# perftest server serves one connection), each tool the server in turn, N rounds (default 3).
# WRITE and SEND are ping-pongs both tools time, each from its own end: the script prints, per
# run, perftest's t_typical and t_avg (from its own output) beside rdmaprobe's figures of
# perftest's definition of the same run (perftest_ns: from each post to the next) and
# rdmaprobe's own p50 (post to completion), all one-way ns, and the ratio rdmaprobe/perftest of
# the typical figures: median [range] per case. READ and atomics are timed by the client alone
# (the server is passive): their ratio is rdmaprobe as the client over perftest as the client,
# two runs of the same round, round-trip ns. Bandwidth is measured by the client alone too (the
# server is passive; perftest's server prints the report its client sends): the ratio is
# rdmaprobe's average over perftest's, each the client of its own run, MB/s (bw-send: perftest's
# server prints its own figure, from its receives, and rdmaprobe's server its own in
# params.peer_tool.received; the ratio is still of the clients').
# rdmaprobe pins its client to the first CPU and its server to the last; perftest runs on the
# other one (taskset).
# Work files: $RDMAPROBE_WORK/perftest-peer (default /var/tmp/rdmaprobe-work).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 iters=5000 size=8 ops=write,send,read,atomic,bw-write,bw-read,bw-send
while (($#)); do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer"; rounds=$2; shift 2;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] && (($2 >= 2)) || die "--iters: an integer of 2 or more"; iters=$2; shift 2;;
    --size) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--size: a positive integer (bytes)"; size=$2; shift 2;;
    --ops) [[ ${2:-} =~ ^(write|send|read|atomic|bw-write|bw-read|bw-send)(,(write|send|read|atomic|bw-write|bw-read|bw-send))*$ ]] ||
      die "--ops: a comma-separated list of write, send, read, atomic, bw-write, bw-read, bw-send"; ops=$2; shift 2;;
    *) die "unknown option $1 (usage: $0 [--rounds N] [--iters N] [--size B] [--ops LIST])";;
  esac
done
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
command -v ib_write_lat >/dev/null || die "perftest is not installed (harness/setup.sh installs it)"
model0_peer_work perftest-peer

# one run: run NAME OP RDMAPROBE-SERVES(0|1) BACKEND
run() {
  local name=$1 op=$2 serves=$3 backend=$4
  local sz=$size scen=lat prog="ib_${op}_lat" verb=$op
  [[ $op == atomic ]] && sz=8
  if [[ $op == bw-* ]]; then
    scen=bw verb=${op#bw-} sz=65536 prog="ib_${op#bw-}_bw"
  fi
  next_port
  local rp=("$bin" "$scen" "$verb" --peer perftest -d model0 -s "$sz" -n "$iters" -p "$port" --backend "$backend"
    --json "$work/$name.json")
  local pt=("$bin" model0 exec -- taskset -c "$([[ $serves == 1 ]] && echo 0 || echo "$last")" "$prog" -d model0
    -s "$sz" -n "$iters" -p "$port")
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
  # lat: perftest's t_typical t_avg (ns; '- -' where it timed nothing: the server of READ and
  # atomics), then rdmaprobe's perftest_ns typical, avg and its p50 (likewise); bw: perftest's
  # average and peak as it printed them, then rdmaprobe's average and peak ('-' as the server)
  local ptf rpf
  if [[ $scen == bw ]]; then
    ptf=$(awk '/BW peak/ {h=1; next} h && $1 ~ /^[0-9]+$/ {printf "%s %s", $4, $3; exit}' "$ptout")
    rpf=$(python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))["runs"]
if not r: print("- - -")
else:
    s=r[0]["summary"]; pk=s["bw_peak_perftest_mib_s"]
    print("%.2f %s -" % (s["bw_avg_mib_s"], "-" if pk is None else "%.2f" % pk))' "$work/$name.json")
  else
    ptf=$(awk '/t_typical/ {h=1; next} h && $1 ~ /^[0-9]+$/ {printf "%.1f %.1f", $5 * 1000, $6 * 1000; exit}' "$ptout")
    rpf=$(python3 -c 'import json,sys
r=json.load(open(sys.argv[1]))["runs"]
if not r: print("- - -")
else:
    x=r[0]; p=x["perftest_ns"]; print("%.1f %.1f %.1f" % (p["typical"], p["avg"], x["latency_ns"]["p50"]))' "$work/$name.json")
  fi
  [[ -n $ptf ]] || ptf="- -"
  echo "$op $backend $serves $ptf $rpf $round" >>"$work/figures"
}

echo "rdmaprobe lat|bw OP --peer perftest against ib_OP_lat|bw, model0, $size B (atomic 8 B, bw 64 KiB), -n $iters, $rounds round(s), OP in $ops"
echo "perftest: $(dpkg-query -W -f='${Version}' perftest 2>/dev/null || echo '?'); CPUs: $(nproc)"
for round in $(seq "$rounds"); do
  for op in ${ops//,/ }; do
    for backend in verbs wr direct; do
      for serves in 1 0; do run "r$round-$op-$backend-$serves" "$op" "$serves" "$backend"; done
    done
  done
done
python3 - "$work/figures" "$ops" <<'EOF'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
def spread(xs):
    return " ".join(f"{x:.3f}" for x in xs) + f"; {statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"
print(f"{'op':8} {'backend':8} {'rdmaprobe is':13} {'perftest':>25} {'rdmaprobe':>20} {'rdmaprobe p50':>14}  ratio: each round; median [range]")
for op in sys.argv[2].split(","):
    for b in ("verbs", "wr", "direct"):
        if op in ("write", "send"):
            for s in ("1", "0"):
                rs = [r for r in rows if r[0] == op and r[1] == b and r[2] == s]
                last = rs[-1]
                print(f"{op:8} {b:8} {'the server' if s == '1' else 'the client':13} {last[3] + '/' + last[4]:>25} "
                      f"{last[5] + '/' + last[6]:>20} {last[7]:>14}  " + spread([float(r[5]) / float(r[3]) for r in rs]))
        else:
            # perftest times as the client (rdmaprobe serves), rdmaprobe as the client: two runs
            pt = {int(r[8]): r for r in rows if r[0] == op and r[1] == b and r[2] == "1"}
            rp = {int(r[8]): r for r in rows if r[0] == op and r[1] == b and r[2] == "0"}
            ratios = [float(rp[k][5]) / float(pt[k][3]) for k in sorted(pt) if k in rp]
            last_pt, last_rp = pt[max(pt)], rp[max(rp)]
            print(f"{op:8} {b:8} {'each client':13} {last_pt[3] + '/' + last_pt[4]:>25} "
                  f"{last_rp[5] + '/' + last_rp[6]:>20} {last_rp[7]:>14}  " + spread(ratios))
print("(perftest: t_typical/t_avg, rdmaprobe: its perftest_ns typical/avg (perftest's definition) and its own p50;")
print(" ns; write and send one-way, the ratio rdmaprobe's perftest_ns.typical over perftest's t_typical of the same run;")
print(" read and atomic round trips, each tool as the client of its own run (the server is passive), the ratio")
print(" rdmaprobe's over perftest's in the same round; bw-*: average/peak MB/s, each tool as the client of its own run,")
print(" the ratio of the averages in the same round; figures of the last round)")
EOF
