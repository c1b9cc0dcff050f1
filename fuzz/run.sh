#!/usr/bin/env bash
# Fuzzes the manifest pipeline for a fixed number of executions and prints what it did.
#   fuzz/run.sh [RUNS]     (default 20000)
# Uses cargo-fuzz on the stable toolchain (RUSTC_BOOTSTRAP=1, no sanitizer), so it needs no
# nightly. Built at opt-level 1 without debug info (the same inputs run): building and running
# take 5.5 minutes instead of 6.4 on two cores, most of it the build.
# New inputs go to a temporary corpus seeded from fuzz/seeds; a crash leaves its input
# in fuzz/artifacts/ and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20000}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2 >&2
corpus=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$corpus" "$log"' EXIT
cp fuzz/seeds/* "$corpus/"
status=0
RUSTC_BOOTSTRAP=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0 cargo fuzz run --sanitizer none manifest "$corpus" -- \
  -runs="$runs" -max_len=16384 -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
crashes=0 # the directory is made by a run that got as far as starting (not by a failed build)
[ ! -d fuzz/artifacts/manifest ] || crashes=$(ls fuzz/artifacts/manifest | wc -l)
echo "fuzz manifest: ${execs:-0} executions, corpus $(ls "$corpus" | wc -l) inputs, findings: $crashes"
if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  tail -n 40 "$log"
  echo "fuzz manifest: FAILED (inputs in fuzz/artifacts/manifest)"
  exit 1
fi
