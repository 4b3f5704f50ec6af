#!/usr/bin/env bash
# harness/headline.sh [--runs N] [-d DEV] [--blocks B] [-Q N]
#
# The headline figure: what the post call costs per WQE through libmlx5's ibv_post_send (verbs)
# and ibv_wr_* (wr) beside the direct path (our WQEs and doorbell, BlueFlame), for RDMA WRITE of
# 8 B inline at postlists 1, 8 and 32, on one device (default model0, which the machine's own
# libmlx5 drives through rdmaprobe's user-space uverbs device). N separate process runs (default
# 5) of `rdmaprobe post-cost`, each running the three backends interleaved; per cell the median
# over the runs of each run's p50 ns/WQE, with the runs' range, and the differences verbs - direct
# and wr - direct computed within each run (so a run-level shift cancels), as median [range].
# Results: $RDMAPROBE_WORK/headline (run-I.json, headline.md). Needs jq.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
runs=5 dev=model0 blocks=1000 cqmod=32
while (($#)); do
  case $1 in
    --runs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--runs: a positive integer"; runs=$2; shift 2;;
    -d) [[ -n ${2:-} ]] || die "-d: a device name"; dev=$2; shift 2;;
    --blocks) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "--blocks: a positive integer"; blocks=$2; shift 2;;
    -Q) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "-Q: a positive integer"; cqmod=$2; shift 2;;
    *) die "unknown option $1 (usage: $0 [--runs N] [-d DEV] [--blocks B] [-Q N])";;
  esac
done
command -v jq >/dev/null || die "needs jq (apt-get install jq)"
cd "$repo"
"$repo/harness/setup.sh" >/dev/null
cargo build --release --quiet --bin rdmaprobe
bin="$repo/target/release/rdmaprobe"
out=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/headline
rm -rf "$out" && mkdir -p "$out"

for i in $(seq 1 "$runs"); do
  "$bin" post-cost -d "$dev" --op write -l 1,8,32 -Q "$cqmod" -n "$blocks" --json "$out/run-$i.json" \
    >"$out/run-$i.txt" 2>&1 || { cat "$out/run-$i.txt" >&2; die "post-cost run $i failed"; }
done

# per run, backend and postlist: p50 ns/WQE of WRITE 8 B inline, CQE every $cqmod (direct: bf)
cells=$(jq -s -c --argjson q "$cqmod" '
  [ to_entries[] | .key as $run | .value.runs[]
    | select(.op == "write" and .inline == true and .cq_mod == $q and (.db_mode == null or .db_mode == "bf"))
    | {run: $run, backend, postlist, p50: .per_wqe_ns.p50} ]' "$out"/run-*.json)
env_line=$(jq -r '.environment | "\(.device) (\(.provider); libibverbs \(.libibverbs_version); provider library \(.provider_library // "-")), \(.cpu_model // "cpu ?")"' "$out/run-1.json")

table=$(jq -r --argjson runs "$runs" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
  def fmt: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  def cell(xs): "\(xs | med | fmt) [\(xs | min | fmt)-\(xs | max | fmt)]";
  . as $all
  | ([.[].postlist] | unique) as $pls
  | $pls[] as $pl
  | [ $all[] | select(.postlist == $pl) ] as $c
  | def v(b): [ $c[] | select(.backend == b) | .p50 ];
    def diff(b): [ range(0; $runs) as $r
        | ([ $c[] | select(.run == $r and .backend == b) | .p50 ][0]) as $x
        | ([ $c[] | select(.run == $r and .backend == "direct") | .p50 ][0]) as $d
        | select($x != null and $d != null) | $x - $d ];
    "| \($pl) | \(cell(v("direct"))) | \(cell(v("verbs"))) | \(cell(v("wr"))) | \(cell(diff("verbs"))) | \(cell(diff("wr"))) | \((v("verbs") | med) / (v("direct") | med) | fmt) |"
' <<<"$cells")

# the separations: inline and gathered, bf and db (direct), per backend
split=$(jq -s -r --argjson q "$cqmod" '
  def med: sort | if length == 0 then null elif length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
  def fmt: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
  def cell(xs): if (xs | length) == 0 then "-" else "\(xs | med | fmt) [\(xs | min | fmt)-\(xs | max | fmt)]" end;
  [ .[] | .runs[] | select(.op == "write" and .cq_mod == $q) ] as $r
  | ([ $r[].postlist ] | unique)[] as $pl
  | def v(b; m; i): [ $r[] | select(.postlist == $pl and .backend == b and .inline == i and (.db_mode // "-") == m) | .per_wqe_ns.p50 ];
    "| \($pl) | \(cell(v("direct"; "bf"; true))) | \(cell(v("direct"; "bf"; false))) | \(cell(v("direct"; "db"; true))) | \(cell(v("direct"; "db"; false))) | \(cell(v("verbs"; "-"; true))) | \(cell(v("verbs"; "-"; false))) | \(cell(v("wr"; "-"; true))) | \(cell(v("wr"; "-"; false))) |"
' "$out"/run-*.json)

{
  echo "Post cost per WQE, RDMA WRITE 8 B inline, CQE every $cqmod WQEs; $runs process runs of"
  echo "\`rdmaprobe post-cost -d $dev --op write -l 1,8,32 -Q $cqmod -n $blocks\` (backends interleaved in each)."
  echo "Device: $env_line"
  echo "ns per WQE: median over the runs of each run's p50 [lowest-highest run]; differences taken within each run."
  echo
  echo "| postlist | direct (bf) | verbs (ibv_post_send) | wr (ibv_wr_*) | verbs - direct | wr - direct | verbs / direct |"
  echo "|---|---|---|---|---|---|---|"
  echo "$table"
  echo
  echo "What each cost is, from the same runs: every backend's WRITE 8 B inline and 8 B gathered (one"
  echo "gather entry), the direct path in each doorbell mode; ns per WQE, median [lowest-highest run]."
  echo
  echo "| postlist | direct bf inline | direct bf gather | direct db inline | direct db gather | verbs inline | verbs gather | wr inline | wr gather |"
  echo "|---|---|---|---|---|---|---|---|---|"
  echo "$split"
} | tee "$out/headline.md"
echo
echo "written: $out/headline.md and run-1..$runs.json"
