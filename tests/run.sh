#!/usr/bin/env bash
# Runs all of atoll's tests: unit, integration, and end-to-end against a private containerd
# (tests/testbed/testbed.sh, started by the tests themselves). Installs what it needs first.
# Run as root on Debian: the test bed starts containerd and creates network namespaces.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/testbed/rust-toolchain.sh
bash tests/testbed/testbed.sh install
# openssl: the URL source's HTTPS test runs a TLS server with a private CA; the mirror tests make
# their API server's CA, server and client certificates with it.
command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends openssl >&2; }

# What is in /tmp now is not ours: the check at the end judges only what this run adds.
before=$(mktemp)
trap 'rm -f "$before"' EXIT
bash tests/leftovers.sh snapshot "$before"

# The integration tests are a handful of binaries grouped by what they need: tests/host (no
# runtime), tests/runtime (one shared test bed), tests/exclusive (the runtime-disturbing tests,
# one at a time, on a test bed of their own), tests/image_gc and tests/binary_smoke (a test bed
# each), tests/architecture (the source). Most tests wait on containerd, timeouts and agents
# rather than burn CPU, so each binary runs more of them at once than there are cores.
export RUST_TEST_THREADS=${RUST_TEST_THREADS:-4}

# The fault-injection feature lets tests/runtime/restart_safety.rs kill atoll between CRI calls.
cargo test --locked --all-targets --features fault-injection "$@"

# A short fuzz run of every parser of network and file input (none may panic on any input).
bash fuzz/run.sh 20000

# Every test removes what it made and unmounts what it mounted, also when it fails. Listed
# always; fatal with ATOLL_LEFTOVERS_FATAL=1 (not yet the default: a few engine roots are written
# again by the engine's tasks after their test).
bash tests/leftovers.sh check "$before" || [ "${ATOLL_LEFTOVERS_FATAL:-0}" != 1 ]
