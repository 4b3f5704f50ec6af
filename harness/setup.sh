#!/usr/bin/env bash
# harness/setup.sh: installs the Debian packages rdmaprobe needs to build and test. Idempotent:
# checks what is missing first, runs `apt-get update` then installs only when something is.
#   harness/setup.sh             build (and the main job)
#   harness/setup.sh --browser   also chromium and poppler-utils (pdfinfo, pdftoppm), for the tests
#                                that render report.html and check report.pdf, fleet-report.pdf
#   harness/setup.sh --softroce  also what the Soft-RoCE guest lane needs
#   harness/setup.sh --cross     also the aarch64 cross compiler (for the aarch64 build check)
#   harness/setup.sh --fleet     also Ansible and an ssh client (the fleet acceptance playbook)
set -euo pipefail

# ibverbs-utils, perftest, qperf and ucx-utils: the unmodified programs tests/preload.rs runs on model0
build_pkgs=(libibverbs-dev librdmacm-dev ibverbs-providers libclang-dev clang pkg-config gcc python3 fonts-dejavu-core
  ibverbs-utils perftest qperf ucx-utils)
softroce_pkgs=(qemu-system-x86 binutils busybox-static rdma-core ibverbs-utils perftest iproute2 nftables cpio kmod xz-utils zstd)
cross_pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
browser_pkgs=(chromium poppler-utils)
fleet_pkgs=(ansible-core openssh-client)

want=("${build_pkgs[@]}")
for a in "$@"; do
  case "$a" in
    --softroce) want+=("${softroce_pkgs[@]}");;
    --cross) want+=("${cross_pkgs[@]}");;
    --browser) want+=("${browser_pkgs[@]}");;
    --fleet) want+=("${fleet_pkgs[@]}");;
    *) echo "setup: unknown option $a (use --softroce, --cross, --browser, --fleet)" >&2; exit 2;;
  esac
done

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [[ -x "$d/cargo" ]] && export PATH="$d:$PATH"
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install a Rust toolchain (rustup, https://rustup.rs) first" >&2
  exit 1
fi
echo "setup: packages present; $(cargo --version)"
