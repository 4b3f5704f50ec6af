#!/usr/bin/env bash
# harness/anchors.sh [--rounds N] [--iters N] [--short] [--check]
#
# rdmaprobe beside perftest on one device, model0 (issue 22 point 5): the same operation, size
# and iteration count, two processes each (server pinned to CPU 0, client to CPU 1), perftest run
# unmodified under `rdmaprobe model0 exec`, the tools alternated A B A B for N rounds (default 5)
# in one script run. perftest 6.06 (Debian's 4.5+0.17) posts through ibv_wr_* by default
# ("ibv_wr* API : ON") and through ibv_post_send with --use_old_post_send: it is set beside
# rdmaprobe's `wr` and `verbs` backends respectively.
#   latency: write, send, read at 8 B and 4 KiB: perftest's t_typical (its median) and t_avg
#            against rdmaprobe's p50 and mean, both one-way (half the round trip) for write and
#            send, the round trip for read;
#            and, by the same definition as perftest's (from each post to the next, the loop's
#            bookkeeping after the response included), rdmaprobe's perftest_ns of the same run;
#   bandwidth: write at 64 KiB, perftest's BW average against rdmaprobe's average, both MiB/s.
# Prints per case the ratio rdmaprobe / perftest of every round and their median [range].
# --short: 2 rounds, write and send 8 B and bw (CI). --check: exit 1 when a p50 or bandwidth
# ratio of any round leaves 0.8-1.25.
# Work files: $RDMAPROBE_WORK/anchors (default /var/tmp/rdmaprobe-work).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=5 iters=5000 short=0 check=0
while (($#)); do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer"; rounds=$2; shift 2;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--iters: a positive integer"; iters=$2; shift 2;;
    --short) short=1 rounds=2; shift;;
    --check) check=1; shift;;
    *) die "unknown option $1 (usage: $0 [--rounds N] [--iters N] [--short] [--check])";;
  esac
done
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
command -v ib_write_lat >/dev/null || die "perftest is not installed (harness/setup.sh installs it)"
# Two builds: a --bin filter would apply to the preload too and leave its library unbuilt.
cargo build --release --quiet --bin rdmaprobe -p rdmaprobe
cargo build --release --quiet -p rdmaprobe-preload
bin="$repo/target/release/rdmaprobe"
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/anchors
rm -rf "$work" && mkdir -p "$work"
export RDMAPROBE_MODEL_DIR="$work/model"
mkdir -m 0700 -p "$RDMAPROBE_MODEL_DIR"
port=$((20000 + RANDOM % 8000))
cpus=$(nproc)
pin_s=(taskset -c 0) pin_c=(taskset -c $((cpus > 1 ? 1 : 0)))

# one server/client pair under a deadline: pair NAME SERVER-CMD... ::: CLIENT-CMD...
pair() {
  local name=$1; shift
  local s=() c=()
  while [[ $1 != ::: ]]; do s+=("$1"); shift; done
  shift; c=("$@")
  next_port
  local S=("${s[@]//@PORT@/$port}") C=("${c[@]//@PORT@/$port}")
  timeout 60 "${pin_s[@]}" "${S[@]}" >"$work/$name.server" 2>&1 &
  local spid=$!
  sleep 0.3
  local ok=0
  for _try in 1 2 3 4 5 6 7 8 9 10; do
    if timeout 60 "${pin_c[@]}" "${C[@]}" >"$work/$name.client" 2>&1; then ok=1; break; fi
    grep -qiE "refused|Couldn't connect|nothing listens" "$work/$name.client" || break
    sleep 0.3
  done
  wait "$spid" || ok=0
  ((ok)) || { cat "$work/$name.server" "$work/$name.client" >&2; die "$name failed"; }
}

# perftest's figures from its client output: lat -> "t_typical t_avg" (ns); bw -> "avg" (MiB/s)
pt_lat() { awk '/t_typical/ {h=1; next} h && $1 ~ /^[0-9]+$/ {printf "%.1f %.1f\n", $5 * 1000, $6 * 1000; exit}' "$1"; }
pt_bw() { awk '/BW average/ {h=1; next} h && $1 ~ /^[0-9]+$/ {print $4; exit}' "$1"; }
# rdmaprobe's p50 and mean, then its perftest figures of the same run (post to next post)
rp_lat() { python3 -c 'import json,sys; x=json.load(open(sys.argv[1]))["runs"][0]; r, p = x["latency_ns"], x.get("perftest_ns") or {}; print(r["p50"], r["mean"], p.get("typical", "-"), p.get("avg", "-"))' "$1"; }
rp_bw() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["summary"]["bw_avg_mib_s"])' "$1"; }

cases=()
if ((short)); then
  cases=("lat write 8 wr" "lat send 8 wr" "lat write 8 verbs" "bw write 65536 wr")
else
  for api in wr verbs; do
    for op in write send read; do for size in 8 4096; do cases+=("lat $op $size $api"); done; done
    cases+=("bw write 65536 $api")
  done
fi

say "anchors: ${#cases[@]} cases x $rounds rounds, $iters iterations, model0, two processes each (CPU 0 server, CPU 1 client)"
results="$work/results.txt"
: >"$results"
for r in $(seq 1 "$rounds"); do
  for cs in "${cases[@]}"; do
    read -r kind op size api <<<"$cs"
    old=(); [[ $api == verbs ]] && old=(--use_old_post_send)
    tag="$kind-$op-$size-$api-$r"
    # A: perftest, B: rdmaprobe; the order swaps every round
    run_pt() {
      pair "pt-$tag" "$bin" model0 exec -- "ib_${op}_${kind}" -d model0 -s "$size" -n "$iters" -p @PORT@ "${old[@]}" \
        ::: "$bin" model0 exec -- "ib_${op}_${kind}" -d model0 -s "$size" -n "$iters" -p @PORT@ "${old[@]}" 127.0.0.1
    }
    run_rp() {
      pair "rp-$tag" "$bin" "$kind" "$op" -d model0 -s "$size" -n "$iters" -p @PORT@ --backend "$api" \
        ::: "$bin" "$kind" "$op" 127.0.0.1 -d model0 -s "$size" -n "$iters" -p @PORT@ --backend "$api" --json "$work/rp-$tag.json"
    }
    if ((r % 2)); then run_pt; run_rp; else run_rp; run_pt; fi
    if [[ $kind == lat ]]; then
      pt=$(pt_lat "$work/pt-$tag.client") rp=$(rp_lat "$work/rp-$tag.json") || die "no figure in $work/rp-$tag.json"
      [[ -n $pt ]] || die "no figure parsed from $work/pt-$tag.client"
      [[ -n $rp ]] || die "no figure in $work/rp-$tag.json"
      echo "$kind $op $size $api $r $pt $rp" >>"$results"
    else
      pt=$(pt_bw "$work/pt-$tag.client") rp=$(rp_bw "$work/rp-$tag.json") || die "no figure in $work/rp-$tag.json"
      [[ -n $pt ]] || die "no figure parsed from $work/pt-$tag.client"
      [[ -n $rp ]] || die "no figure in $work/rp-$tag.json"
      echo "$kind $op $size $api $r $pt - $rp - - -" >>"$results"
    fi
  done
done

mhz=$(awk -F: '/cpu MHz/ {gsub(/ /, "", $2); print $2; exit}' /proc/cpuinfo)
tsc=$("$bin" clock 2>/dev/null | awk '/^TSC rate:/ {print $3; exit}')
python3 - "$results" "$check" "$mhz" "$tsc" <<'EOF'
import sys, statistics as st
path, check, mhz, tsc = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
rows = {}
for line in open(path):
    kind, op, size, api, r, a1, a2, b1, b2, c1, c2 = line.split()
    f = lambda x: None if x == "-" else float(x)
    rows.setdefault((kind, op, int(size), api), []).append((float(a1), f(a2), float(b1), f(b2), f(c1), f(c2)))
def cell(xs):
    return f"{st.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"
bad = []
print(f"clocks: rdmaprobe's calibrated TSC {tsc} MHz; /proc/cpuinfo 'cpu MHz' {mhz} (what perftest's get_cpu_mhz reads and checks)")
print("rdmaprobe / perftest per round; median [lowest-highest] over the rounds; the two tools' own medians beside")
print("p50, mean: rdmaprobe's table (post to completion) over perftest's t_typical, t_avg (post to next post);")
print("same definition: rdmaprobe's perftest figures of the same run (its perftest_ns: post to next post) over them\n")
print(f"| case | API (perftest / rdmaprobe) | p50 ratio | mean ratio | same definition t_typical | t_avg | perftest p50 | rdmaprobe p50 |")
print("|---|---|---|---|---|---|---|---|")
for (kind, op, size, api), v in rows.items():
    pt_api = "ibv_wr_* / wr" if api == "wr" else "--use_old_post_send / verbs"
    r50 = [x[2] / x[0] for x in v]
    unit = "ns" if kind == "lat" else "MiB/s"
    rm = [x[3] / x[1] for x in v if x[1] and x[3]]
    rt = [x[4] / x[0] for x in v if x[4]]
    ra = [x[5] / x[1] for x in v if x[1] and x[5]]
    name = f"{kind} {op} {size} B" + (" (one-way)" if kind == "lat" and op != "read" else " (round trip)" if kind == "lat" else " (average)")
    print(f"| {name} | {pt_api} | {cell(r50)} | {cell(rm) if rm else '-'} | {cell(rt) if rt else '-'} | {cell(ra) if ra else '-'} | {st.median([x[0] for x in v]):.1f} {unit} | {st.median([x[2] for x in v]):.1f} {unit} |")
    if any(not 0.8 <= x <= 1.25 for x in r50):
        bad.append(f"{name} {api}: ratios {', '.join(f'{x:.3f}' for x in r50)}")
if bad:
    print("\noutside 0.8-1.25 in some round:\n  " + "\n  ".join(bad))
if check and bad:
    sys.exit(1)
EOF
say "anchors: done ($work/results.txt; each run's output beside it)"
