#!/usr/bin/env bash
# Are the release builds reproducible? Builds the commit checked out here twice, in two clones
# at different paths and depths, packages both, and compares every binary and artifact byte
# for byte. Prints each file's sha256 and whether the two builds agree; fails on any
# difference. Takes two cross builds (about 20 minutes on two cores), so it runs in
# `benches/run`, not in CI (CI packages its one build twice and compares that).
#
#   cross/repro.sh [TARGET...]       (default: all three)
#
# What makes them agree (nothing here helps them along): atoll's own sources are named by
# relative paths, dependencies and std by their registry's and toolchain's paths, which are the
# same for both; the packages take their times from the commit (cross/package.sh); both are
# signed with one key made for this run (kept outside both outputs), and Ed25519 signatures of
# the same bytes are the same.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf x86_64-unknown-linux-musl)
say() { echo "repro: $*" >&2; }

commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain --untracked-files=no)" ] ||
  say "the work tree has changes: both builds are of the commit $commit, without them"
top=$(mktemp -d /tmp/atoll-repro.XXXXXX)
trap 'rm -rf "$top"' EXIT
a=$top/a
b=$top/b/some/deeper/path/atoll
key=$top/release.key
minisign -G -W -s "$key" -p "$top/release.pub" >/dev/null

build() { # build DIR: clone, cross-build and package the commit in DIR
  git clone -q --no-checkout . "$1"
  git -C "$1" checkout -q "$commit"
  (cd "$1" && unset CARGO_TARGET_DIR && bash cross/build.sh "${TARGETS[@]}" >/dev/null &&
    ATOLL_PACKAGE_PREBUILT=1 ATOLL_RELEASE_KEY=$key bash cross/package.sh dist "${TARGETS[@]}" 2>/dev/null)
}
# One after the other: side by side, the two would take as long and each build's own three
# targets already keep two cores busy.
for dir in "$a" "$b"; do
  start=$SECONDS
  build "$dir" || { say "FAIL: the build in $dir failed"; exit 1; }
  say "built in $dir in $((SECONDS - start)) s"
done

differ=0
echo "reproducible builds of $commit, in two directories ($a, $b):"
compare() { # compare LABEL FILE_A FILE_B
  local sum_a sum_b verdict=identical
  sum_a=$(sha256sum <"$2" | cut -c1-16)
  sum_b=$(sha256sum <"$3" | cut -c1-16)
  if ! cmp -s "$2" "$3"; then verdict="DIFFER ($sum_b)"; differ=1; fi
  printf '  %-52s %10d bytes  %s  %s\n' "$1" "$(stat -c %s "$2")" "$sum_a" "$verdict"
}
for t in "${TARGETS[@]}"; do
  compare "atoll-$t" "$a/target/cross/atoll-$t" "$b/target/cross/atoll-$t"
done
for f in $(cd "$a/dist" && ls *.deb *.tar.gz *.cdx.json SHA256SUMS SHA256SUMS.minisig); do
  compare "$f" "$a/dist/$f" "$b/dist/$f"
done
if [ "$differ" != 0 ]; then
  say "FAIL: the two builds differ (diffoscope shows where)"
  exit 1
fi
echo "  every binary and artifact is byte-identical"
