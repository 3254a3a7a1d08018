#!/usr/bin/env bash
# Installs what leanburn needs beyond a Rust toolchain: a Vulkan loader and Mesa's drivers,
# whose llvmpipe lets the CubeCL kernels run through wgpu on a machine without a GPU.
# Idempotent; needs root or sudo when packages are missing.
set -euo pipefail

packages=(mesa-vulkan-drivers libvulkan1)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: ${packages[*]} already installed"
fi
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
