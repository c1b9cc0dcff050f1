#!/usr/bin/env bash
# Where the bytes of a release binary go (the footprint issue's table): builds it with its
# symbols kept (the release profile otherwise unchanged: opt-level z, LTO, one codegen unit),
# then sums the sizes of its function and data symbols by crate, atoll's own by module, and
# the sections no symbol accounts for. Markdown on stdout, the build on stderr.
#   bash cross/bloat.sh [TARGET]      default aarch64-unknown-linux-musl
# cargo bloat reads only host binaries; this reads the cross-built one with readelf.
set -euo pipefail
cd "$(dirname "$0")/.."

t=${1:-aarch64-unknown-linux-musl}
bash cross/build.sh "$t" >/dev/null # the tools (zig, cargo-zigbuild, targets) and the stripped size
export PATH="${ATOLL_CROSS_TOOLS:-$HOME/.cache/atoll-cross}/venv/bin:$PATH"
dir=${ATOLL_BLOAT_TARGET_DIR:-target/bloat}
. cross/release.sh
CARGO_PROFILE_RELEASE_STRIP=none CARGO_TARGET_DIR=$dir release_build "$t"
bin="$dir/$t/release/atoll"
stripped=$(stat -c %s "target/cross/atoll-$t")

# Symbols: size and demangled name (names may hold spaces).
readelf -sW --demangle=rust "$bin" | awk '$4 == "FUNC" || $4 == "OBJECT" {
  name = $8; for (i = 9; i <= NF; i++) name = name " " $i
  print $3 "\t" name
}' >"$dir/symbols.tsv"

# The crate of a symbol: the first path segment that names one (`<atoll::pod::types::Pod as
# serde::Deserialize>` is atoll's); the module of atoll's: its second segment.
awk -F'\t' -v stripped="$stripped" '
function owner(name) {
  if (name ~ /^ring_core_/ || name ~ /^(ecp_)?nistz/ || name ~ /_(neon|nohw|hw|armv8|v8)$/) return "ring (C and assembly)"
  if (name ~ /^OUTLINED_FUNCTION_/) return "outlined code (pieces shared by many functions)"
  if (name ~ /libunwind/) return "libunwind"
  if (match(name, /[A-Za-z_][A-Za-z0-9_]*::/)) return substr(name, RSTART, RLENGTH - 2)
  return "C: musl libc and other unnamed"
}
{
  size = $1 + 0; if (size == 0) next
  c = owner($2); crate[c] += size; total += size
  if (c == "atoll") {
    rest = substr($2, index($2, "atoll::") + 7)
    m = rest; sub(/::.*/, "", m); sub(/[^A-Za-z0-9_].*/, "", m)
    module[m] += size
  }
}
END {
  printf "Stripped binary: %d bytes; symbols below account for %d bytes (the rest: string and\n", stripped, total
  printf "constant data without a symbol, unwind and relocation tables, ELF headers).\n\n"
  print "| crate | bytes | share |"; print "|---|---:|---:|"
  n = 0; for (c in crate) { keys[++n] = c }
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (crate[keys[j]] > crate[keys[i]]) { x = keys[i]; keys[i] = keys[j]; keys[j] = x }
  other = 0
  for (i = 1; i <= n; i++) {
    if (i <= 25) printf "| %s | %d | %.1f%% |\n", keys[i], crate[keys[i]], 100 * crate[keys[i]] / stripped
    else other += crate[keys[i]]
  }
  if (other > 0) printf "| (%d more crates) | %d | %.1f%% |\n", n - 25, other, 100 * other / stripped
  print ""; print "| atoll module | bytes |"; print "|---|---:|"
  n = 0; delete keys; for (m in module) { keys[++n] = m }
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (module[keys[j]] > module[keys[i]]) { x = keys[i]; keys[i] = keys[j]; keys[j] = x }
  for (i = 1; i <= n; i++) printf "| %s | %d |\n", keys[i], module[keys[i]]
}' "$dir/symbols.tsv"
