#!/usr/bin/env bash
# The demo: builds atoll, brings up a private containerd (the test bed in tests/testbed, with
# its offline busybox images), and runs atoll on the example manifests in configs/examples.
# Stop it with Ctrl-C; everything it started is torn down. Run as root on Debian.
#
# It keeps to itself, so it runs beside an atoll installed on the box: its socket, state,
# containerd and logs are under one temporary directory (under $TMPDIR, else /tmp), kubelet's
# healthz port is off, and whenever it is interrupted it leaves no process, mount or directory
# behind. ATOLL_BIN=path runs that binary instead of building one (the tests do).
set -euo pipefail
cd "$(dirname "$0")/.."

. tests/testbed/rust-toolchain.sh
bash tests/testbed/testbed.sh install
if [ -n "${ATOLL_BIN:-}" ]; then
  bin=$ATOLL_BIN
else
  cargo build --release --locked
  bin=./target/release/atoll
fi

# hello-web serves on the host's network, on 127.0.0.1:8080 (configs/examples/hello-web.yaml).
if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then
  echo "demo: 127.0.0.1:8080 is taken (ss -ltnp 'sport = 8080' says by what); hello-web needs it" >&2
  exit 1
fi

dir="" testbed="" atoll=""
# The teardown's messages: a closed pipe (| tee, then Ctrl-C) or a closed terminal must not
# stop the teardown, so a failed write is dropped.
say() { echo "$@" >&2 2>/dev/null || true; } # the message to stderr; echo's own complaint nowhere
cleanup() {
  # Finish the teardown whatever else arrives: Ctrl-C again, a closed terminal, a reader gone.
  trap '' INT TERM HUP PIPE
  set +e
  if [ -n "$atoll" ]; then
    kill -TERM "$atoll" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$atoll" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$atoll" 2>/dev/null || true
    wait "$atoll" 2>/dev/null || true
    atoll=""
  fi
  if [ -n "$testbed" ]; then
    say "demo: tearing down the test bed"
    # TERM ends it at any stage, a start-up still waiting for another test bed included; its
    # teardown stops every container it ran and unmounts what they used.
    kill -TERM "$testbed" 2>/dev/null || true
    exec 3>&- || true
    wait "$testbed" 2>/dev/null || true
    testbed=""
  fi
  [ -n "$dir" ] && [ -d "$dir" ] || return 0
  # atoll leaves its pods' volumes mounted when it exits (Secret and ConfigMap tmpfs, subPaths:
  # the pods keep running, to be adopted): with the containers gone, they come off here,
  # deepest first, and only then is the directory removed, never across a mount.
  awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  rm -rf --one-file-system "$dir"
  dir=""
}
trap cleanup EXIT
trap 'exit 0' INT TERM HUP PIPE

dir=$(mktemp -d "${TMPDIR:-/tmp}/atoll-demo.XXXXXX")
mkfifo "$dir/testbed.ctl"
# The test bed runs until its standard input closes: fd 3 holds it open for the demo's life.
bash tests/testbed/testbed.sh run "$dir/testbed" <"$dir/testbed.ctl" >"$dir/testbed.out" 2>"$dir/testbed.log" &
testbed=$!
exec 3>"$dir/testbed.ctl"

echo "demo: starting a private containerd (log: $dir/testbed.log)" >&2
for _ in $(seq 600); do
  grep -q '^READY ' "$dir/testbed.out" 2>/dev/null && break
  kill -0 "$testbed" 2>/dev/null || { cat "$dir/testbed.log" >&2; exit 1; }
  sleep 0.5
done
grep -q '^READY ' "$dir/testbed.out" || { echo "demo: the test bed did not start" >&2; cat "$dir/testbed.log" >&2; exit 1; }
# shellcheck disable=SC1090
. "$(sed -n 's/^READY //p' "$dir/testbed.out")"

# A kubelet config file, as on a real node; the pods' logs go under the test bed.
cat >"$dir/kubelet-config.yaml" <<CONFIG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $PWD/configs/examples
podLogsDir: $ATOLL_TB_LOGS
fileCheckFrequency: 20s
healthzPort: 0
CONFIG
echo "demo: pod logs under $ATOLL_TB_LOGS (tail -f $ATOLL_TB_LOGS/*/*/0.log)" >&2
echo "demo: from another terminal: $bin pods --api-socket=$dir/atoll.sock (or describe, logs -f, restart)" >&2
"$bin" run \
  --config="$dir/kubelet-config.yaml" \
  --atoll-config="$PWD/configs/atoll.yaml" \
  --container-runtime-endpoint="$ATOLL_TB_ENDPOINT" \
  --root-dir="$dir/state" \
  --api-socket="$dir/atoll.sock" \
  --hostname-override=atoll-demo &
atoll=$!
wait "$atoll"
