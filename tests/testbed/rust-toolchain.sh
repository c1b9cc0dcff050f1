# Sourced by configs/demo.sh and tests/run.sh: makes sure cargo is on PATH, installing the
# Rust toolchain with rustup on a machine that has none.
if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] || {
    echo "installing the Rust toolchain with rustup" >&2
    command -v curl >/dev/null || { apt-get update -qq && apt-get install -y -qq curl ca-certificates >&2; }
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal >&2
  }
  export PATH="$HOME/.cargo/bin:$PATH"
fi
