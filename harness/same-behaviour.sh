#!/usr/bin/env bash
# harness/same-behaviour.sh OLD NEW: runs two rdmaprobe binaries through the same commands on
# model0 and diffs what they print, their exit statuses and the shape of their JSON, with the
# figures masked (every number becomes N). For a change meant to leave behaviour as it was (a
# restructuring): an empty diff says flags, help texts, messages, table layouts, JSON keys and
# exit statuses are the same. Each command runs once per binary, one after the other.
#   harness/same-behaviour.sh /tmp/rdmaprobe-old target/release/rdmaprobe [--quick]
#     --quick: leaves out the suite (about 40 s a binary)
# Exit 0 when nothing differs, 1 when something does (the diff is printed), 2 on bad arguments.
set -uo pipefail
(($# >= 2)) || { echo "usage: $0 OLD NEW [--quick]" >&2; exit 2; }
old=$(readlink -f "$1") new=$(readlink -f "$2")
quick=0
[[ ${3:-} == --quick ]] && quick=1
for b in "$old" "$new"; do [[ -x $b ]] || { echo "$0: $b is not an executable" >&2; exit 2; }; done
work=$(mktemp -d)
# KEEP=1 keeps the work directory (both binaries' outputs) and names it.
if [[ -n ${KEEP:-} ]]; then trap 'echo "same-behaviour: outputs kept in $work"' EXIT; else trap 'rm -rf "$work"' EXIT; fi

# What one binary prints for every case, masked: "== case", the exit status, stdout, stderr.
mask() {
  sed -E -e "s#$work/[a-z]+#WORK#g" -e 's#/tmp/rdmaprobe-diag-([0-9]+-[0-9]+|[0-9a-f]{16})#DIAG#g' \
    -e 's/[-+]?[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?/N/g' -e 's/ +/ /g' -e 's/N( N)+/N/g'
}
# The shape of a JSON document: every path with the type of its value (numbers, strings and
# nulls alike are "scalar": a figure that is null in one run and a number in another is noise;
# histograms' base64 text too).
shape() {
  python3 - "$1" <<'EOF'
import json, sys
def walk(v, p, out):
    if isinstance(v, dict):
        for k in sorted(v):
            walk(v[k], p + "." + k, out)
    elif isinstance(v, list):
        out.add(p + "[]")
        for x in v:
            walk(x, p + "[]", out)
    else:
        out.add(p + " scalar")
try:
    doc = json.load(open(sys.argv[1]))
except Exception as e:
    print("not JSON:", type(e).__name__); sys.exit()
s = set(); walk(doc, "", s)
print("\n".join(sorted(s)))
EOF
}

cases() {
  # name | arguments (word-split); WORK/x names a file in the binary's own work directory
  cat <<'EOF'
help|--help
help-lat|lat --help
help-bw|bw --help
help-post-cost|post-cost --help
help-suite|suite --help
help-compare|compare --help
help-plot|plot --help
help-doctor|doctor --help
help-ping|ping --help
help-devices|devices --help
help-clock|clock --help
help-fleet|fleet-report --help
version|--version
no-args|
bad-cmd|frobnicate
devices|devices
devices-json|devices --json
clock|clock --window-ms 100
lat-write|lat write --loopback -d model0 -n 2000 --json WORK/lat.json
lat-send-all|lat send --loopback -a -n 200 --backend verbs
lat-read|lat read --loopback -s 64 -n 500 --backend direct
lat-atomic|lat atomic --loopback -n 500 -A CMP_AND_SWAP
lat-ud|lat send --loopback -c UD -s 64 -n 300
lat-bad-size|lat write --loopback -s 0
lat-bad-n|lat write --loopback -n 100000000000
lat-bad-op|lat frob --loopback
lat-conflict|lat write --loopback -c UD
bw-write|bw write --loopback -s 4096 -n 2000 --min-ms 0 --json WORK/bw.json
bw-send-q|bw send --loopback -s 64 -q 2 -n 2000 --min-ms 0 --backend wr
bw-read-bidir|bw read --loopback -s 1024 -b -n 1000 --min-ms 0 --backend direct
bw-bad-t|bw write --loopback -t 0
post-cost|post-cost --op write,send -l 1,8 -n 50 --json WORK/pc.json
post-cost-bad|post-cost --op frob
doctor|doctor
doctor-json|doctor --json
ping|ping --loopback
ping-bad|ping -c UD --loopback
compare-self|compare WORK/lat.json WORK/lat.json
compare-bad|compare WORK/nothing.json WORK/lat.json
plot|plot WORK/lat.json --out WORK/plot
plot-bad|plot WORK/nothing.json --out WORK/plot2
EOF
  ((quick)) || echo "suite|suite --quick --out WORK/suite"
}

run_all() {
  local bin=$1 out=$2 dir=$3
  mkdir -p "$dir"
  : >"$out"
  while IFS='|' read -r name args; do
    args=${args//WORK/$dir}
    # shellcheck disable=SC2086
    timeout 300 "$bin" $args >"$dir/stdout" 2>"$dir/stderr" </dev/null
    rc=$?
    { echo "== $name: exit $rc"; echo "-- stdout"; mask <"$dir/stdout"; echo "-- stderr"; mask <"$dir/stderr"; } >>"$out"
  done < <(cases)
  for f in lat.json bw.json pc.json suite/results.json; do
    { echo "== json $f"; [[ -f $dir/$f ]] && shape "$dir/$f" || echo "(none)"; } >>"$out"
  done
  { echo "== files"; (cd "$dir" && find . -type f ! -name stdout ! -name stderr | sort); } >>"$out"
}

echo "same-behaviour: $old"
run_all "$old" "$work/old.txt" "$work/a"
echo "same-behaviour: $new"
run_all "$new" "$work/new.txt" "$work/b"
sed -i "s#$work/[ab]#WORK#g" "$work/old.txt" "$work/new.txt"
if diff -u "$work/old.txt" "$work/new.txt"; then
  echo "same-behaviour: no difference in $(grep -c '^== ' "$work/old.txt") cases (figures masked)"
  exit 0
fi
echo "same-behaviour: the outputs differ (above)"
exit 1
