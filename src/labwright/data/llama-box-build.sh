#!/bin/sh
# Builds llama.cpp's llama-server in a build box of the lab: a container of one Debian release, so the binary links
# that release's glibc and runs on its guests (labwright.llamacpp.buildbox runs it there).
#   llama-box-build.sh SDIST WORKDIR JOBS "PACKAGE..." CMAKE_FLAG...
# The packages (the build's apt names) are installed when missing; the sdist is unpacked once into WORKDIR and its
# build directory kept, so a killed build resumes where ninja stopped and a second run of an unchanged source does
# nothing. The binary ends as WORKDIR/build/bin/llama-server.
set -eu
sdist=$1 work=$2 jobs=$3 packages=$4
shift 4
export DEBIAN_FRONTEND=noninteractive
missing=""
for pkg in $packages; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || missing="$missing $pkg"
done
# lw_apt: apt-get that waits for another apt's lock (unattended-upgrades in a fresh box); put here on push
# @labwright.aptlock function@
if [ -n "$missing" ]; then
  echo "apt-get install$missing"
  if lw_apt update -q; then printf '%s\n' "$out"; else printf '%s\n' "$out" >&2; exit 1; fi
  # shellcheck disable=SC2086
  if lw_apt install -y -q --no-install-recommends $missing; then printf '%s\n' "$out"
  else printf '%s\n' "$out" >&2; exit 1; fi
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
