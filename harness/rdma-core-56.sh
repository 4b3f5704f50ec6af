#!/usr/bin/env bash
# harness/rdma-core-56.sh: builds rdma-core 56.1 (Debian trixie's source package, unmodified)
# into an install prefix on this Debian 12 machine and prints the prefix. Cached: a second call
# prints the prefix at once. Trixie's binary packages need glibc 2.38 and do not run here; the
# source builds in about a minute on 2 cores (cmake, ninja; no pyverbs, no man pages).
#   PREFIX=$(harness/rdma-core-56.sh)   # default $RDMAPROBE_WORK/rdma-core-56 (/var/tmp/rdmaprobe-work/...)
# The prefix holds include/, lib/ (libibverbs.so.1.14.56.*, libmlx5.so.1.*.56.*, and the providers
# in lib/libibverbs/, which that libibverbs loads) and lib/pkgconfig: what
# RDMAPROBE_RDMA_CORE_PREFIX and harness/compare-rdma-core.sh take.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}
dir=$work/rdma-core-56-src
prefix=$work/rdma-core-56
if [[ -f $prefix/ready ]]; then
  echo "$prefix"
  exit 0
fi
[[ $(id -u) -eq 0 ]] || die "rdma-core-56: needs root once (apt-get for the build packages)"
need=(cmake ninja-build libnl-3-dev libnl-route-3-dev libudev-dev pkg-config python3-docutils gcc dpkg-dev)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "rdma-core-56: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

rm -rf "$dir" "$prefix" && mkdir -p "$dir"/{apt/parts,apt/lists/partial,apt/cache/archives/partial,src}
# a private apt configuration whose only source is trixie's deb-src, derived from this machine's
"$repo/harness/trixie-sources.py" "$dir/apt/parts/trixie-src.sources" deb-src || die "rdma-core-56: no Debian apt source here to derive trixie's deb-src from"
apt_o=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$dir/apt/parts"
       -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::Cache=$dir/apt/cache" -o APT::Sandbox::User=root)
say "rdma-core-56: fetching trixie's rdma-core source" >&2
apt-get "${apt_o[@]}" update -qq >&2 || die "rdma-core-56: apt-get update of trixie's deb-src"
# the .dsc may be missing from the mirror (404) while the tarball downloads: the tarball is all
# that is used, so apt-get's status is not the test, the tarball is
(cd "$dir/src" && apt-get "${apt_o[@]}" source --download-only rdma-core >&2) || true
tarball=$(ls "$dir"/src/rdma-core_56.*.orig.tar.gz 2>/dev/null | head -n 1)
[[ -n $tarball ]] || die "rdma-core-56: no rdma-core 56 source tarball from trixie: $(ls "$dir/src")"
tar -C "$dir/src" -xzf "$tarball"
srcdir=$(find "$dir/src" -maxdepth 1 -type d -name 'rdma-core-56*' | head -n 1)
[[ -d $srcdir ]] || die "rdma-core-56: no source directory in $tarball"
say "rdma-core-56: building $(basename "$srcdir") into $prefix" >&2
mkdir -p "$srcdir/build"
(cd "$srcdir/build" &&
  cmake -GNinja -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib .. >"$dir/cmake.log" 2>&1 &&
  ninja install >"$dir/ninja.log" 2>&1) ||
  { tail -n 30 "$dir"/cmake.log "$dir"/ninja.log >&2 || true; die "rdma-core-56: build failed (logs in $dir)"; }
ls "$prefix"/lib/libibverbs.so.1.14.56.* >/dev/null 2>&1 || die "rdma-core-56: no libibverbs 56 in $prefix/lib"
ls "$prefix"/lib/libibverbs/libmlx5-rdmav*.so >/dev/null 2>&1 || die "rdma-core-56: no mlx5 provider in $prefix/lib/libibverbs"
touch "$prefix/ready"
echo "$prefix"
