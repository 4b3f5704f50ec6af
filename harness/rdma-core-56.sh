#!/usr/bin/env bash
# harness/rdma-core-56.sh: builds rdma-core 56.1 (Debian trixie's source package, unmodified)
# into an install prefix on this Debian 12 machine and prints the prefix. Cached: a second call
# prints the prefix at once. Trixie's binary packages need glibc 2.38 and do not run here; the
# source builds in about a minute on 2 cores (cmake, ninja; no pyverbs, no man pages).
#   PREFIX=$(harness/rdma-core-56.sh)   # default $RDMAPROBE_WORK/rdma-core-56 (/var/tmp/rdmaprobe-work/...)
# The prefix holds include/, lib/ (libibverbs.so.1.14.56.*, libmlx5.so.1.*.56.*, and the providers
# in lib/libibverbs/, which that libibverbs loads) and lib/pkgconfig: what
# RDMAPROBE_RDMA_CORE_PREFIX and harness/compare-rdma-core.sh take.
#
# harness/rdma-core-56.sh --spin N builds the same source a second time, into
# $RDMAPROBE_WORK/rdma-core-56-spinN, with one deliberate, documented cost added to libmlx5's
# send path: at the entry of mlx5_post_send (ibv_post_send) and of mlx5_send_wr_complete
# (ibv_wr_complete), N dependent additions of zero (asm, so the compiler keeps each) to the
# pointer argument before it is first read: a chain of about one cycle each on the post's
# critical path (an independent chain would overlap with the rest of the post, out of order;
# an empty asm emits nothing). Its cost is what post-cost measures. Nothing else changes; the patch is
# applied to the build tree here, nothing of rdma-core enters the project. It is the regression
# a CI compare of two libmlx5 builds must catch (docs/ci-recipe.md): the plain build against
# itself must not be flagged, the slowed one must.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
work=${RDMAPROBE_WORK:-/var/tmp/rdmaprobe-work}
dir=$work/rdma-core-56-src
prefix=$work/rdma-core-56
spin=
if [[ ${1:-} == --spin ]]; then
  [[ ${2:-} =~ ^[0-9]+$ ]] || die "rdma-core-56: --spin N: a count of loop iterations"
  spin=$2
  plain=$("$0") || die "rdma-core-56: the plain build the slowed one is made beside"
  [[ $plain == "$prefix" ]] || die "rdma-core-56: the plain build is not at $prefix"
  dir=$work/rdma-core-56-spin$spin-src
  prefix=$work/rdma-core-56-spin$spin
elif (($#)); then
  die "rdma-core-56: usage: $0 [--spin N]"
fi
# a slowed build is made again when this script (its patch) changed
stamp=
[[ -z $spin ]] || stamp=$(sha256sum "$0" | cut -d' ' -f1)
if [[ -f $prefix/ready && $(cat "$prefix/ready") == "$stamp" ]]; then
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
if [[ -n $spin ]]; then
  # the plain build's tarball, already fetched
  tarball=$(ls "$work"/rdma-core-56-src/src/rdma-core_56.*.orig.tar.gz 2>/dev/null | head -n 1)
  [[ -n $tarball ]] || die "rdma-core-56: no source tarball in $work/rdma-core-56-src/src"
else
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
fi
tar -C "$dir/src" -xzf "$tarball"
srcdir=$(find "$dir/src" -maxdepth 1 -type d -name 'rdma-core-56*' | head -n 1)
[[ -d $srcdir ]] || die "rdma-core-56: no source directory in $tarball"
if [[ -n $spin ]]; then
  python3 - "$srcdir/providers/mlx5/qp.c" "$spin" <<'PY' || die "rdma-core-56: the spin patch did not apply to providers/mlx5/qp.c"
import sys
path, n = sys.argv[1], int(sys.argv[2])
s = open(path).read()
spin = ("\n/* rdmaprobe harness/rdma-core-56.sh --spin: a deliberate cost on the send path: %d\n"
        " * dependent additions of zero to the argument's pointer before it is first read (asm,\n"
        " * so the compiler keeps each one): a chain of about one cycle each on the post's\n"
        " * critical path */\n"
        "static inline void *rdmaprobe_spin(void *p)\n{\n"
        "\tunsigned long x = (unsigned long)p;\n\n"
        "\tfor (unsigned int i = 0; i < %du; i++)\n\t\t__asm__ __volatile__(\"add $0, %%0\" : \"+r\"(x));\n"
        "\treturn (void *)x;\n}\n\n" % (n, n))
heads = [("int mlx5_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,\n\t\t   struct ibv_send_wr **bad_wr)\n{\n", "wr"),
         ("static int mlx5_send_wr_complete(struct ibv_qp_ex *ibqp)\n{\n", "ibqp")]
for h, arg in heads:
    if s.count(h) != 1:
        sys.exit("no single " + h.split("(")[0])
    s = s.replace(h, h + "\t%s = rdmaprobe_spin(%s);\n" % (arg, arg))
heads = [h for h, _ in heads]
first = s.index(heads[0].split("\n")[0])
s = s[:first] + spin + s[first:]
open(path, "w").write(s)
PY
  grep -c '= rdmaprobe_spin(' "$srcdir/providers/mlx5/qp.c" | grep -qx 2 || die "rdma-core-56: the spin is not in both functions"
fi
say "rdma-core-56: building $(basename "$srcdir") into $prefix${spin:+ (spin $spin in mlx5_post_send and mlx5_send_wr_complete)}" >&2
mkdir -p "$srcdir/build"
(cd "$srcdir/build" &&
  cmake -GNinja -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib .. >"$dir/cmake.log" 2>&1 &&
  ninja install >"$dir/ninja.log" 2>&1) ||
  { tail -n 30 "$dir"/cmake.log "$dir"/ninja.log >&2 || true; die "rdma-core-56: build failed (logs in $dir)"; }
ls "$prefix"/lib/libibverbs.so.1.14.56.* >/dev/null 2>&1 || die "rdma-core-56: no libibverbs 56 in $prefix/lib"
ls "$prefix"/lib/libibverbs/libmlx5-rdmav*.so >/dev/null 2>&1 || die "rdma-core-56: no mlx5 provider in $prefix/lib/libibverbs"
echo "$stamp" >"$prefix/ready"
echo "$prefix"
