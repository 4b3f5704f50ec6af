#!/usr/bin/env bash
# harness/trap-cost.sh [--rounds N] [--iters N]
#
# What model0's doorbell trap (`rdmaprobe model0 exec --engine trap`, src/uverbs/trap.rs) costs,
# measured: the same programs with and without it, two processes each (server on CPU 0, client
# on the last CPU), the cases alternated for N rounds (default 3; the order reversed every other
# round), one-way latency of 8-byte messages, p50 in ns:
#   ib_write_lat            --engine hooks          (perftest's t_typical)
#   ib_write_lat            --engine trap           (one trapped doorbell per post:
#                                                    model0 exec sets MLX5_SHUT_UP_BF=1)
#   ucx_perftest rc_verbs   --engine hooks  am_lat  (UCX through libibverbs)
#   ucx_perftest rc_mlx5    --engine trap   am_lat  (UCX's own mlx5 path: BlueFlame, its default)
#   ucx_perftest rc_mlx5    --engine trap   am_lat  UCX_IB_MMIO_MODE=db (an 8-byte doorbell)
#   rdmaprobe lat send --backend direct             (rdmaprobe's own mlx5 path: no trap)
# and per round the trap's cost per one-way message, ib_write_lat trap - hooks.
# Work files: $RDMAPROBE_WORK/trap-cost (default /var/tmp/rdmaprobe-work).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
rounds=3 iters=20000
while (($#)); do
  case $1 in
    --rounds) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--rounds: a positive integer"; rounds=$2; shift 2;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--iters: a positive integer"; iters=$2; shift 2;;
    *) die "unknown option $1 (usage: $0 [--rounds N] [--iters N])";;
  esac
done
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
command -v ib_write_lat >/dev/null || die "perftest is not installed (harness/setup.sh installs it)"
command -v ucx_perftest >/dev/null || die "ucx_perftest is not installed (ucx-utils; harness/setup.sh installs it)"
model0_peer_work trap-cost

# pair NAME ENV-AND-COMMAND... : the command as the server (port appended as -p P) and as the
# client (-p P 127.0.0.1), under a deadline
pair() {
  local name=$1; shift
  next_port
  timeout 120 taskset -c 0 env "$@" -p "$port" >"$work/$name.server" 2>&1 &
  local spid=$! ok=0
  sleep 0.5
  for _try in 1 2 3 4 5 6 7 8 9 10; do
    if timeout 120 taskset -c "$last" env "$@" -p "$port" 127.0.0.1 >"$work/$name.client" 2>&1; then ok=1; break; fi
    grep -qiE "refused|Couldn't connect|nothing listens" "$work/$name.client" || break
    sleep 0.3
  done
  wait "$spid" || ok=0
  ((ok)) || { cat "$work/$name.server" "$work/$name.client" >&2; die "$name failed"; }
}

ex=("$bin" model0 exec --timeout 110)
run_case() {
  local c=$1 tag=$1-$2
  case $c in
    write-hooks) pair "$tag" "${ex[@]}" --engine hooks -- ib_write_lat -d model0 -s 8 -n "$iters";;
    write-trap) pair "$tag" "${ex[@]}" --engine trap -- ib_write_lat -d model0 -s 8 -n "$iters";;
    rc_verbs) pair "$tag" "${ex[@]}" --engine hooks -- ucx_perftest -d model0:1 -x rc_verbs -t am_lat -s 8 -n "$iters";;
    rc_mlx5) pair "$tag" "${ex[@]}" --engine trap -- ucx_perftest -d model0:1 -x rc_mlx5 -t am_lat -s 8 -n "$iters";;
    rc_mlx5-db) pair "$tag" UCX_IB_MMIO_MODE=db "${ex[@]}" --engine trap -- ucx_perftest -d model0:1 -x rc_mlx5 -t am_lat -s 8 -n "$iters";;
    direct)
      next_port
      timeout 120 taskset -c 0 "$bin" lat send -d model0 -s 8 -n "$iters" --backend direct -p "$port" >"$work/$tag.server" 2>&1 &
      local spid=$!
      sleep 0.5
      timeout 120 taskset -c "$last" "$bin" lat send 127.0.0.1 -d model0 -s 8 -n "$iters" --backend direct -p "$port" \
        --json "$work/$tag.json" >"$work/$tag.client" 2>&1 || { cat "$work/$tag.client" >&2; die "$tag failed"; }
      wait "$spid" || die "$tag: the server failed";;
  esac
}
# the p50 in ns of one case's client output
p50() {
  local c=$1 f=$work/$1-$2.client
  case $c in
    write-*) awk '/t_typical/ {h=1; next} h && $1 ~ /^[0-9]+$/ {printf "%.0f\n", $5 * 1000; exit}' "$f";;
    rc_*) awk '/^Final:/ {printf "%.0f\n", $3 * 1000; exit}' "$f";;
    direct) python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["runs"][0]["latency_ns"]["p50"])' "$work/$1-$2.json";;
  esac
}

cases=(write-hooks write-trap rc_verbs rc_mlx5 rc_mlx5-db direct)
say "trap-cost: ${#cases[@]} cases x $rounds rounds, $iters iterations of 8 B, model0, two processes each"
results=$work/results.txt
: >"$results"
for r in $(seq 1 "$rounds"); do
  order=("${cases[@]}")
  ((r % 2)) || order=($(printf '%s\n' "${cases[@]}" | tac))
  for c in "${order[@]}"; do run_case "$c" "$r"; done
  for c in "${cases[@]}"; do
    v=$(p50 "$c" "$r")
    [[ -n $v ]] || die "no figure parsed for $c in round $r ($work/$c-$r.client)"
    echo "$c $r $v" >>"$results"
  done
done
python3 - "$results" <<'EOF'
import sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    c, r, v = line.split()
    rows.setdefault(c, {})[int(r)] = float(v)
print("one-way p50, ns: median [lowest-highest] over the rounds; every round's figure after it")
for c, v in rows.items():
    xs = [v[r] for r in sorted(v)]
    print(f"  {c:12} {st.median(xs):8.0f} [{min(xs):.0f}-{max(xs):.0f}]   {' '.join(f'{x:.0f}' for x in xs)}")
d = [rows["write-trap"][r] - rows["write-hooks"][r] for r in sorted(rows["write-hooks"])]
print(f"the trap's cost per one-way message (ib_write_lat trap - hooks, per round): median {st.median(d):.0f} ns [{min(d):.0f}-{max(d):.0f}]")
EOF
