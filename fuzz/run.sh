#!/usr/bin/env bash
# Fuzzes every target in fuzz/fuzz_targets for a fixed number of executions each and prints
# what it did, one line per target.
#   fuzz/run.sh [RUNS] [TARGET...]     (default 20000 runs, every target)
# Uses cargo-fuzz on the stable toolchain (RUSTC_BOOTSTRAP=1, no sanitizer), so it needs no
# nightly. Built once, at opt-level 1 without debug info, then each target runs from a
# temporary corpus seeded from fuzz/seeds/<target> (when there is one). A finding (a panic,
# an overflow, a failed invariant, a timeout) leaves its input in fuzz/artifacts/<target>
# and fails the run, after every target has had its turn.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-20000}
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2 >&2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(ls fuzz/fuzz_targets | sed -n 's/\.rs$//p')
export RUSTC_BOOTSTRAP=1 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_DEBUG=0
build=$(mktemp)
trap 'rm -f "$build"' EXIT
if ! cargo fuzz build --sanitizer none >"$build" 2>&1; then
  tail -n 40 "$build"
  echo "fuzz: the build failed"
  exit 1
fi
failed=()
for t in "${targets[@]}"; do
  corpus=$(mktemp -d)
  log=$(mktemp)
  scratch=$(mktemp -d) # the target's TMPDIR: whatever it writes there goes with it
  [ ! -d "fuzz/seeds/$t" ] || cp -r "fuzz/seeds/$t/." "$corpus/"
  status=0
  start=$(date +%s)
  TMPDIR=$scratch cargo fuzz run --sanitizer none "$t" "$corpus" -- \
    -runs="$runs" -max_len=16384 -timeout=10 -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  findings=0 # the directory is made by a run that got as far as starting
  [ ! -d "fuzz/artifacts/$t" ] || findings=$(ls "fuzz/artifacts/$t" | wc -l)
  echo "fuzz $t: ${execs:-0} executions, corpus $(ls "$corpus" | wc -l) inputs, findings: $findings ($(($(date +%s) - start)) s)"
  if [ "$status" -ne 0 ] || [ "$findings" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz $t: FAILED (inputs in fuzz/artifacts/$t)"
    failed+=("$t")
  fi
  rm -rf "$corpus" "$log" "$scratch"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}"
  exit 1
fi
