#!/usr/bin/env bash
# cross/package.sh refuses to make a release it cannot sign with the release key: without
# ATOLL_RELEASE_KEY (and without an explicit ATOLL_RELEASE_UNSIGNED=1) it stops before building
# anything, naming the variable, and leaves no signature and no public key in its output, where
# a verifier would take a throwaway key's public half for the release's. A second or two.
#
#   cross/package-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "package-test: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }
top=$(mktemp -d /tmp/atoll-package-test.XXXXXX)
trap 'rm -rf "$top"' EXIT

# expect_refusal NAME MESSAGE ENV...: package.sh with ENV fails, saying MESSAGE, leaving OUT bare.
expect_refusal() {
  local name=$1 message=$2 out=$top/$1 code=0
  shift 2
  # Prebuilt: should the refusal be missing, the script fails later without a long build.
  env -u ATOLL_RELEASE_KEY -u ATOLL_RELEASE_UNSIGNED ATOLL_PACKAGE_PREBUILT=1 "$@" \
    timeout 600 bash cross/package.sh "$out" x86_64-unknown-linux-musl >"$top/$name.log" 2>&1 || code=$?
  [ "$code" != 0 ] || die "$name: package.sh succeeded"
  grep -qF -- "$message" "$top/$name.log" || die "$name: no \"$message\" in its output: $(cat "$top/$name.log")"
  local left
  left=$(find "$out" -name 'SHA256SUMS*' -o -name '*.pub' -o -name '*.deb' 2>/dev/null || true)
  [ -z "$left" ] || die "$name: left $left"
  log "$name: refused ($message)"
}

expect_refusal no-key "ATOLL_RELEASE_KEY is not set"
expect_refusal empty-key "ATOLL_RELEASE_KEY is not set" ATOLL_RELEASE_KEY=
expect_refusal not-asked "ATOLL_RELEASE_KEY is not set" ATOLL_RELEASE_UNSIGNED=yes
expect_refusal missing-key "ATOLL_RELEASE_KEY=$top/none.key: no such readable file" ATOLL_RELEASE_KEY="$top/none.key"
expect_refusal both "both ATOLL_RELEASE_KEY and ATOLL_RELEASE_UNSIGNED=1" ATOLL_RELEASE_KEY="$top/none.key" ATOLL_RELEASE_UNSIGNED=1
log "ok"
