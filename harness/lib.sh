# harness/lib.sh: shared by the harness scripts (sourced, not run).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
  [[ -x "$d/cargo" ]] && [[ ":$PATH:" != *":$d:"* ]] && export PATH="$d:$PATH"
done
say() { printf '%s\n' "[$(date +%H:%M:%S)] $*"; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

# model0_peer_work NAME: for a script that runs rdmaprobe against another program under
# `rdmaprobe model0 exec`: builds rdmaprobe and the preloadable model0, and sets bin (the
# binary), work ($RDMAPROBE_WORK/NAME, made anew), RDMAPROBE_MODEL_DIR (exported, 0700), port
# (a random start below the kernel's ephemeral ports; take each with next_port) and last (the
# last CPU).
model0_peer_work() {
  cargo build --release --quiet --bin rdmaprobe -p rdmaprobe
  cargo build --release --quiet -p rdmaprobe-preload
  bin="$repo/target/release/rdmaprobe"
  work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}/$1
  rm -rf "$work" && mkdir -p "$work"
  export RDMAPROBE_MODEL_DIR="$work/model"
  mkdir -m 0700 -p "$RDMAPROBE_MODEL_DIR"
  port=$((20000 + RANDOM % 8000))
  last=$(($(nproc) - 1))
}

# next_port: moves $port on to the next port no socket on this machine uses (listening,
# connected or in TIME_WAIT). The ports stay below 32768, where Linux's ephemeral range
# (ip_local_port_range) starts, so no client's outgoing connection takes one between this
# check and the server's bind: CI once failed on "Address already in use" at 38966.
next_port() {
  local tries=0
  while :; do
    port=$((port + 1))
    ((port < 32768)) || port=20000
    [[ -z $(ss -Htan "( sport = :$port )" 2>/dev/null) ]] && return 0
    ((++tries < 1000)) || die "next_port: no free port in 20000-32767"
  done
}
