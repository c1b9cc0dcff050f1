#!/usr/bin/env bash
# What the tests left behind: `snapshot FILE` writes the /tmp/atoll-* entries there now;
# `check FILE` (after the tests) waits for the last test bed's teardown, then fails listing every
# /tmp/atoll-* entry that was not in FILE and every mount under /tmp/atoll-* that is not under
# one of them. Entries from before the run (another run's, a developer's) are not ours to judge.
set -euo pipefail

entries() { find /tmp -maxdepth 1 -name 'atoll-*' 2>/dev/null | sort; }

case "${1:-}" in
  snapshot) entries >"$2" ;;
  check)
    before=$2
    # A test binary's test bed tears down after the binary exits, holding the lock until done.
    if [ -e /run/atoll-testbed.lock ]; then flock -w 300 /run/atoll-testbed.lock true || true; fi
    new=$(comm -13 "$before" <(entries))
    mounts=$(awk '{print $5}' /proc/self/mountinfo | grep '^/tmp/atoll-' | while read -r m; do
      top=/tmp/$(echo "${m#/tmp/}" | cut -d/ -f1)
      grep -qxF "$top" "$before" || echo "$m"
    done || true)
    if [ -n "$new" ] || [ -n "$mounts" ]; then
      echo "the tests left behind $(echo "$new" | grep -c . || true) entries and $(echo "$mounts" | grep -c . || true) mounts:" >&2
      [ -z "$new" ] || echo "$new" | sed 's/^/  left: /' >&2
      [ -z "$mounts" ] || echo "$mounts" | sed 's/^/  mounted: /' >&2
      exit 1
    fi
    echo "no leftovers in /tmp"
    ;;
  *) echo "usage: $0 snapshot|check FILE" >&2; exit 2 ;;
esac
