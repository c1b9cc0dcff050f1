#!/usr/bin/env bash
# The demo: builds atoll, brings up a private containerd (the test bed in tests/testbed, with
# its offline busybox images), and runs atoll on the example manifests in configs/examples.
# Stop it with Ctrl-C; everything it started is torn down. Run as root on Debian.
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/testbed/rust-toolchain.sh
bash tests/testbed/testbed.sh install
cargo build --release --locked

dir=$(mktemp -d /tmp/atoll-demo.XXXXXX)
mkfifo "$dir.ctl"
# The test bed runs until its standard input closes: fd 3 holds it open for the demo's life.
bash tests/testbed/testbed.sh run "$dir/testbed" <"$dir.ctl" >"$dir.out" 2>"$dir.log" &
testbed=$!
exec 3>"$dir.ctl"
atoll=""
cleanup() {
  if [ -n "$atoll" ]; then kill "$atoll" 2>/dev/null || true; wait "$atoll" 2>/dev/null || true; fi
  exec 3>&- || true
  echo "demo: tearing down the test bed" >&2
  wait "$testbed" 2>/dev/null || true
  rm -rf "$dir" "$dir.ctl" "$dir.out" "$dir.log"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

echo "demo: starting a private containerd (log: $dir.log)" >&2
for _ in $(seq 600); do
  grep -q '^READY ' "$dir.out" 2>/dev/null && break
  kill -0 "$testbed" 2>/dev/null || { cat "$dir.log" >&2; exit 1; }
  sleep 0.5
done
grep -q '^READY ' "$dir.out" || { echo "demo: the test bed did not start" >&2; cat "$dir.log" >&2; exit 1; }
# shellcheck disable=SC1090
. "$(sed -n 's/^READY //p' "$dir.out")"

# A kubelet config file, as on a real node; the pods' logs go under the test bed.
cat >"$dir/kubelet-config.yaml" <<CONFIG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $PWD/configs/examples
podLogsDir: $ATOLL_TB_LOGS
fileCheckFrequency: 20s
CONFIG
echo "demo: pod logs under $ATOLL_TB_LOGS (tail -f $ATOLL_TB_LOGS/*/*/0.log)" >&2
echo "demo: from another terminal: ./target/release/atoll pods (or describe, logs -f, restart)" >&2
./target/release/atoll run \
  --config="$dir/kubelet-config.yaml" \
  --atoll-config="$PWD/configs/atoll.yaml" \
  --container-runtime-endpoint="$ATOLL_TB_ENDPOINT" \
  --root-dir="$dir/state" \
  --hostname-override=atoll-demo &
atoll=$!
wait "$atoll"
