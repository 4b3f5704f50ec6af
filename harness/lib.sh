# harness/lib.sh: shared by the harness scripts (sourced, not run).
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
  [[ -x "$d/cargo" ]] && [[ ":$PATH:" != *":$d:"* ]] && export PATH="$d:$PATH"
done
say() { printf '%s\n' "[$(date +%H:%M:%S)] $*"; }
die() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
