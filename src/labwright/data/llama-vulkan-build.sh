#!/bin/sh
# Builds llama.cpp's llama-server with its Vulkan backend (-DGGML_VULKAN=ON) on a Debian 13 build box
# (labwright.llamacpp.vulkan runs it there: Debian 12's Vulkan headers 1.3.239 lack vk::LayerSettingEXT).
#   llama-vulkan-build.sh SDIST WORKDIR JOBS CMAKE_FLAG...
# The sdist is unpacked once into WORKDIR and its build directory kept, so a killed build resumes where ninja
# stopped and a second run of an unchanged source does nothing. The binary ends as WORKDIR/build/bin/llama-server.
set -eu
sdist=$1 work=$2 jobs=$3
shift 3
export DEBIAN_FRONTEND=noninteractive
# the packages are scripts/apt/llama-vulkan.list's (the same names, Debian 13)
missing=""
for pkg in cmake ninja-build g++ libvulkan-dev glslc spirv-headers glslang-tools; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  echo "apt-get install$missing"
  apt-get update -q
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing
fi
mkdir -p "$work"
if [ ! -e "$work/.unpacked" ]; then
  rm -rf "$work/src"
  mkdir -p "$work/src"
  tar -xzf "$sdist" -C "$work/src" --strip-components=1
  touch "$work/.unpacked"
fi
cmake -S "$work/src/vendor/llama.cpp" -B "$work/build" "$@"
cmake --build "$work/build" --target llama-server -j "$jobs"
