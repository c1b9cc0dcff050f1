#!/usr/bin/env bash
# Cross-builds atoll as static musl binaries for the edge targets, prints their sizes, runs
# `atoll version` for each under qemu-user-static, and checks the dependency list each carries.
#
#   cross/build.sh                 all three targets
#   cross/build.sh TARGET...       only these (aarch64-unknown-linux-musl,
#                                  armv7-unknown-linux-musleabihf, x86_64-unknown-linux-musl)
#
# How: cargo-zigbuild with zig as C compiler and linker, both from PyPI (in a venv under
# ~/.cache/atoll-cross). std is built from source with the binary, at its release profile and
# without unwind tables (cross/release.sh says how and why). The targets build in parallel.
# Binaries land in target/cross/.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf x86_64-unknown-linux-musl)
TOOLS=${ATOLL_CROSS_TOOLS:-$HOME/.cache/atoll-cross}
ZIGLANG_VERSION=0.15.1
ZIGBUILD_VERSION=0.20.1

say() { echo "cross: $*" >&2; }

need_apt=()
command -v qemu-aarch64-static >/dev/null || need_apt+=(qemu-user-static)
command -v file >/dev/null || need_apt+=(file)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >&2
fi

if [ ! -x "$TOOLS/venv/bin/cargo-zigbuild" ] || ! "$TOOLS/venv/bin/python" -m ziglang version >/dev/null 2>&1; then
  say "installing zig $ZIGLANG_VERSION and cargo-zigbuild $ZIGBUILD_VERSION into $TOOLS/venv"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install -q --disable-pip-version-check "ziglang==$ZIGLANG_VERSION" "cargo-zigbuild==$ZIGBUILD_VERSION"
fi
export PATH="$TOOLS/venv/bin:$PATH"
AUDITABLE_VERSION=0.7.7
if ! cargo install --list | grep -qx "cargo-auditable v$AUDITABLE_VERSION:"; then
  say "installing cargo-auditable $AUDITABLE_VERSION (the dependency list in the binary)"
  cargo install -q --locked cargo-auditable --version "$AUDITABLE_VERSION" >&2
fi

for t in "${TARGETS[@]}"; do
  case "$t" in
    aarch64-unknown-linux-musl | x86_64-unknown-linux-musl) # rustup's target: musl's crt objects
      rustup target list --installed | grep -qx "$t" || rustup target add "$t" >&2 ;;
    armv7-unknown-linux-musleabihf) ;;
    *) say "unknown target $t"; exit 2 ;;
  esac
done
rustup component list --installed | grep -q '^rust-src' || rustup component add rust-src >&2
. cross/release.sh

mkdir -p target/cross
# The targets build side by side, each in a target directory of its own (one cargo holds a
# target directory's lock): much of a release build is the one codegen unit and LTO of the
# final crate, a single thread, so two cores build three targets in about half the time.
# Each build's output goes to target/cross/build-TARGET.log, shown when it fails.
fail=0
pids=()
for t in "${TARGETS[@]}"; do
  say "building $t"
  (CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/cross/build}-$t" release_build "$t" 2>"target/cross/build-$t.log") &
  pids+=($!)
done
for i in "${!TARGETS[@]}"; do
  t=${TARGETS[$i]}
  if ! wait "${pids[$i]}"; then
    cat "target/cross/build-$t.log" >&2
    say "FAIL: the build for $t failed"
    fail=1
  fi
done
[ "$fail" = 0 ] || exit 1
rows=()
for t in "${TARGETS[@]}"; do
  grep -h "Finished" "target/cross/build-$t.log" | sed "s/^ */  [$t] /" >&2 || true
  bin="target/cross/atoll-$t"
  cp "${CARGO_TARGET_DIR:-target/cross/build}-$t/$t/release/atoll" "$bin"
  case "$t" in
    aarch64-*) qemu=qemu-aarch64-static ;;
    armv7-*) qemu=qemu-arm-static ;;
    x86_64-*) qemu=qemu-x86_64-static ;;
  esac
  kind=$(file -b "$bin")
  size=$(stat -c %s "$bin")
  if ! grep -q "statically linked" <<<"$kind"; then
    say "FAIL: $bin is not statically linked: $kind"
    fail=1
  fi
  if ! version=$("$qemu" "$bin" version); then
    say "FAIL: $bin did not run under $qemu"
    fail=1
  fi
  echo "$version" | sed "s/^/  [$t] /"
  if ! deps=$(python3 cross/deps.py "$bin") || ! grep -q "^atoll " <<<"$deps"; then
    say "FAIL: $bin carries no dependency list that cargo audit, trivy or syft could read"
    fail=1
  fi
  if ! grep -qx "target: $t" <<<"$version"; then
    say "FAIL: $bin reports a target other than $t"
    fail=1
  fi
  rows+=("$(printf '%-32s %9d bytes %6d KiB  %s' "$t" "$size" $((size / 1024)) "$(cut -d, -f1-2 <<<"$kind")")")
done

echo
echo "atoll release binaries (stripped, static):"
printf '  %s\n' "${rows[@]}"
exit $fail
