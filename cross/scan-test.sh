#!/usr/bin/env bash
# Can a vulnerability scanner read a deployed atoll? Runs the stock `cargo audit bin`
# (cargo-audit from crates.io, installed when missing) on each cross-built binary, offline,
# against a local advisory database holding two made-up advisories: one for a crate the binary
# holds (ring, at any version below 999) and one for a crate it does not (openssl). The scan
# must read the binary's own dependency list (as many crates as `cross/deps.py` reads), report
# the first advisory and not the second.
#
#   cross/scan-test.sh [TARGET...]       (default: all three; binaries from cross/build.sh)
#
# Installing cargo-audit builds it (about 7 minutes on two cores), so `benches/run` runs this,
# not CI; CI checks that each binary carries the list (cross/build.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf x86_64-unknown-linux-musl)
AUDIT_VERSION=0.22.2
say() { echo "scan-test: $*" >&2; }
die() { say "FAIL: $*"; exit 1; }

if ! cargo install --list | grep -qx "cargo-audit v$AUDIT_VERSION:"; then
  say "installing cargo-audit $AUDIT_VERSION"
  cargo install -q --locked cargo-audit --version "$AUDIT_VERSION" >&2
fi

db=$(mktemp -d)
trap 'rm -rf "$db"' EXIT
advisory() { # advisory ID CRATE: a made-up advisory, every version below 999 affected
  mkdir -p "$db/crates/$2"
  printf '```toml\n[advisory]\nid = "%s"\npackage = "%s"\ndate = "2026-01-01"\ncategories = []\nkeywords = []\n\n[versions]\npatched = [">= 999.0.0"]\n```\n\n# A made-up advisory for %s\n\nFor cross/scan-test.sh only.\n' \
    "$1" "$2" "$2" >"$db/crates/$2/$1.md"
}
advisory RUSTSEC-2099-0001 ring
advisory RUSTSEC-2099-0002 openssl
git -C "$db" init -q
git -C "$db" add -A
git -C "$db" -c user.name=scan-test -c user.email=scan-test@localhost commit -qm "made-up advisories"

for t in "${TARGETS[@]}"; do
  bin=target/cross/atoll-$t
  [ -x "$bin" ] || die "no $bin: build it first (cross/build.sh $t)"
  crates=$(python3 cross/deps.py "$bin" | wc -l)
  status=0
  out=$(cargo audit --db "$db" --no-fetch --stale bin "$bin" 2>&1) || status=$?
  [ "$status" = 1 ] || die "$t: cargo audit exited $status, not 1 (one vulnerability): $out"
  grep -q "Found 'cargo auditable' data in .* ($crates dependencies)" <<<"$out" ||
    die "$t: cargo audit did not read the $crates crates the binary lists: $out"
  grep -q "RUSTSEC-2099-0001" <<<"$out" || die "$t: the advisory for ring was not reported: $out"
  ! grep -q "RUSTSEC-2099-0002" <<<"$out" || die "$t: an advisory for a crate atoll does not use was reported: $out"
  echo "scan $t: cargo audit $AUDIT_VERSION read $crates crates and reported the advisory for ring (and not the one for openssl)"
done
