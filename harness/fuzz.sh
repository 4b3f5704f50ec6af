#!/usr/bin/env bash
# harness/fuzz.sh [N]: fuzzes what rdmaprobe reads from others (tests/fuzz.rs): N mutated
# out-of-band messages (default 10 million), N mutated result files through the reader and
# compare, N/10 through the plots and the report, and N histogram encodings with lying lengths
# (plain and deflated: payload and compressed lengths, digits, lowest and highest value) through
# the decoder and the plots, under `ulimit -v` 1 GB; prints executions, time and rate per
# target. Exit 0 when nothing panicked, hung or ran out of memory. CI runs the same tests with a
# short count.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
n=${1:-10000000}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [N]" >&2; exit 2; }
cd "$repo"
say "fuzz: $n out-of-band messages, $n result files read and compared, $((n / 10)) plotted, $n histograms"
RDMAPROBE_FUZZ_ITERS=$n cargo test --release --quiet --test fuzz -- --nocapture --test-threads 1 2>&1 |
  grep -oE "fuzz [^:]+: .*|test result.*|panicked.*|FAILED.*"
