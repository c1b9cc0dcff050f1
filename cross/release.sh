# Sourced by cross/build.sh and cross/bloat.sh: how a shipped binary is built, in one place.
#   release_build TARGET       cargo auditable zigbuild --release for TARGET into $CARGO_TARGET_DIR
# std is rebuilt from source with the binary (-Zbuild-std, on the stable toolchain through
# RUSTC_BOOTSTRAP=1 and the rust-src component) so that it gets the release profile too:
#   - opt-level z and LTO with atoll's code (rustup's std is prebuilt at opt-level 3);
#   - no unwind tables (-C force-unwind-tables=no): with panic=abort nothing unwinds, and the
#     tables were 626 KB (.eh_frame and its index) of the 3.9 MB aarch64 binary;
#   - std's `optimize_for_size` feature (small sorts, integer formatting and float parsing; the
#     same results) and without its `backtrace` feature (the symbolizer: gimli, addr2line). A
#     panic still prints its message and location before the process aborts; it prints no
#     backtrace, which without unwind tables could not be walked anyway.
# The dependency list is embedded in cargo-auditable's format (`cargo auditable`: a `.dep-v0`
# section of zlib-compressed JSON, 1.6 KB, not loaded at run time) so that `cargo audit bin`,
# trivy and syft can scan a deployed binary; cross/deps.py prints it.
# armv7: rustup has no musl std for it at all, so zig provides musl's crt objects and libc
# (-C link-self-contained=no); and the code is Thumb-2 (-C target-feature=+thumb-mode, which
# rustc calls unstable and warns about): 2.45 MB instead of 3.42 MB in ARM mode, for the same
# armv7-a baseline (VFPv3, no NEON required). The thumbv7neon target would require NEON.
release_build() {
  local t=$1 flags="-C force-unwind-tables=no"
  case "$t" in armv7-*) flags="$flags -C link-self-contained=no -C target-feature=+thumb-mode" ;; esac
  RUSTC_BOOTSTRAP=1 RUSTFLAGS="$flags" cargo auditable zigbuild --release --locked --target "$t" \
    -Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size >&2
}
