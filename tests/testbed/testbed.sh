#!/usr/bin/env bash
# atoll's test bed: a private containerd with its own root, state, socket, runc root and CNI
# configuration, tiny images built offline from Debian's busybox-static, and a local image
# registry on 127.0.0.1 for real pulls. Nothing of the machine's own containerd is touched.
#
#   testbed.sh install        install the Debian packages the test bed needs (as root)
#   testbed.sh run DIR        bring the test bed up under DIR, print "READY DIR/env", then keep
#                             it up until standard input closes or SIGTERM/SIGINT arrives, and
#                             tear everything down (tasks, shims, mounts, netns, bridge, DIR)
#   testbed.sh down DIR       tear down a test bed whose runner died (idempotent)
#   testbed.sh restart DIR    stop the test bed's containerd and start it again (its tasks and
#                             shims stay up, as on a real runtime upgrade or crash)
#
# DIR/env holds the facts tests need (socket, registry, images, bridge subnet) as KEY=value.
# Only one test bed runs at a time on a machine: `run` waits for /run/atoll-testbed.lock.
# Set ATOLL_TESTBED_KEEP=1 to keep DIR (logs, configs) after teardown for debugging.
#
# The runtime's root (content store and snapshots: the image filesystem kubelet and atoll
# measure) is a tmpfs of its own, ATOLL_TESTBED_IMAGEFS_SIZE (256m) large, so thresholds such as
# imageGCHighThresholdPercent mean the same on every machine, whatever its own disk holds.
#
# ATOLL_CONTAINERD picks the runtime: 1.6 (Debian 12's, the default), 1.7 (Debian 13's) or 2.1
# (Debian unstable's). A version the system does not have is fetched once as Debian's .deb
# from the mirror this machine's apt already uses, through a private apt configuration (the
# system's packages and lists are untouched), and unpacked under ATOLL_TESTBED_CACHE
# (/var/cache/atoll-testbed); the system's runc is kept. Later runs need no network. The real
# programs the tests talk to (kubectl, Prometheus, the konnectivity server and agent built from
# Debian's Go sources) are fetched or built into the same cache by `install` (counterparts.sh).
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins busybox-static iproute2 docker-registry util-linux iptables apache2-utils minisign age)
IMAGEFS_SIZE=${ATOLL_TESTBED_IMAGEFS_SIZE:-256m}
PAUSE_IMAGE="registry.k8s.io/pause:3.10"
BUSYBOX_IMAGE="docker.io/library/busybox:1.36"
BRIDGE="atoll-tb0"
SUBNET="10.77.7.0/24"
GATEWAY="10.77.7.1"
LOCK=/run/atoll-testbed.lock
CONTAINERD_WANTED=${ATOLL_CONTAINERD:-1.6}
CACHE=${ATOLL_TESTBED_CACHE:-/var/cache/atoll-testbed}

log() { echo "testbed: $*" >&2; }
die() { log "error: $*"; exit 1; }

install_packages() {
  [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and creates network namespaces)"
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  [ -x /bin/busybox ] || missing+=(busybox-static)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v docker-registry >/dev/null || missing+=(docker-registry)
  command -v flock >/dev/null || missing+=(util-linux)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v htpasswd >/dev/null || missing+=(apache2-utils)
  command -v minisign >/dev/null || missing+=(minisign) # signed manifests are made with the stock CLI
  command -v age-keygen >/dev/null || missing+=(age) # encrypted Secrets are made with the stock CLI
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
    # Debian starts the packaged daemons where systemd runs; the test bed uses its own.
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
      systemctl disable --now docker-registry >/dev/null 2>&1 || true
    fi
  fi
}

# The Debian suite that ships containerd MAJOR.MINOR.
suite_for() {
  case "$1" in
    1.6) echo bookworm ;;
    1.7) echo trixie ;;
    2.*) echo sid ;;
    *) die "ATOLL_CONTAINERD=$1: the test bed knows 1.6 (Debian 12), 1.7 (Debian 13) and 2.x (Debian unstable)" ;;
  esac
}

# debian_mirror, private_apt_init, private_apt: this machine's Debian mirror, and apt configurations of
# the test bed's own on it (tests/testbed/mirror.sh).
. "$(dirname "${BASH_SOURCE[0]}")/mirror.sh"
# kubectl_bin, prometheus_bin, konnectivity_bin, go_checker: the real counterparts tests talk to.
. "$(dirname "${BASH_SOURCE[0]}")/counterparts.sh"

# containerd_bin: the directory holding the containerd, containerd-shim-runc-v2 and ctr this
# test bed runs, fetching Debian's package for CONTAINERD_WANTED when the system's is another.
containerd_bin() {
  local want=$CONTAINERD_WANTED have
  have=$(containerd --version 2>/dev/null | awk '{print $3}' | sed 's/^v//')
  case "$have" in "$want".*) dirname "$(command -v containerd)"; return ;; esac
  local suite root="$CACHE/containerd-$want"
  suite=$(suite_for "$want")
  if [ -x "$root/usr/bin/containerd" ] && [ -x "$root/usr/bin/containerd-shim-runc-v2" ] && [ -x "$root/usr/bin/ctr" ]; then
    echo "$root/usr/bin"
    return
  fi
  command -v apt-get >/dev/null || die "ATOLL_CONTAINERD=$want needs apt-get to fetch Debian's containerd"
  local mirror apt="$CACHE/apt-$suite"
  mirror=$(private_apt_init "$apt" "$suite")
  log "fetching containerd $want from Debian $suite at $mirror (private apt configuration in $apt)"
  private_apt "$apt" apt-get update >&2 || die "apt-get update of Debian $suite failed"
  (cd "$apt/deb" && private_apt "$apt" apt-get download "containerd/$suite" >&2) ||
    die "downloading containerd from Debian $suite failed"
  local deb version
  deb=$(ls "$apt"/deb/containerd_*.deb 2>/dev/null | head -n1)
  [ -n "$deb" ] || die "no containerd .deb from Debian $suite"
  version=$(dpkg-deb -f "$deb" Version)
  case "$version" in
    "$want".*) ;;
    *) die "Debian $suite ships containerd $version, not $want" ;;
  esac
  rm -rf "$root.new" && mkdir -p "$root.new"
  dpkg-deb -x "$deb" "$root.new"
  echo "$version" >"$root.new/VERSION"
  rm -rf "$root" && mv "$root.new" "$root"
  rm -rf "$apt"
  log "containerd $version unpacked in $root"
  echo "$root/usr/bin"
}

arch() {
  case "$(dpkg --print-architecture)" in
    amd64) echo '"architecture":"amd64"' ;;
    arm64) echo '"architecture":"arm64","variant":"v8"' ;;
    armhf) echo '"architecture":"arm","variant":"v7"' ;;
    i386) echo '"architecture":"386"' ;;
    *) die "unsupported architecture $(dpkg --print-architecture)" ;;
  esac
}

# build_image NAME REF ENTRYPOINT_JSON CMD_JSON: a docker-archive tarball of a busybox rootfs.
build_image() {
  local name=$1 ref=$2 entrypoint=$3 cmd=$4 work="$DIR/images/$1"
  rm -rf "$work" && mkdir -p "$work/rootfs/bin" "$work/rootfs/etc" "$work/rootfs/tmp" \
    "$work/rootfs/var/www" "$work/rootfs/root" "$work/rootfs/proc" "$work/rootfs/sys" "$work/rootfs/dev"
  chmod 1777 "$work/rootfs/tmp"
  cp /bin/busybox "$work/rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || ln -s busybox "$work/rootfs/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$work/rootfs/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/rootfs/etc/group"
  echo "hello from atoll's test image" >"$work/rootfs/var/www/index.html"
  cat >"$work/rootfs/pause" <<'PAUSE'
#!/bin/sh
# The test bed's pause: hold the sandbox's namespaces until told to stop.
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
PAUSE
  chmod 755 "$work/rootfs/pause"
  tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/rootfs" -cf "$work/layer.tar" .
  local diff_id config config_id
  diff_id=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  config="{$(arch),\"os\":\"linux\",\"created\":\"1970-01-01T00:00:00Z\",\"config\":{\"Env\":[\"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\"],\"Entrypoint\":$entrypoint,\"Cmd\":$cmd,\"WorkingDir\":\"/\"},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]},\"history\":[{\"created\":\"1970-01-01T00:00:00Z\",\"created_by\":\"atoll testbed from /bin/busybox\"}]}"
  printf '%s' "$config" >"$work/config.json"
  config_id=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config_id.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config_id" "$ref" >"$work/manifest.json"
  tar -C "$work" -cf "$DIR/images/$name.tar" manifest.json "$config_id.json" layer.tar
  rm -rf "$work"
}

free_port() { # free_port [PORT TO SKIP...]
  local port
  for port in $(seq 35000 35200); do
    case " $* " in *" $port "*) continue ;; esac
    # Any TCP socket on it (a client's connection too, in any state), not only listeners: the
    # range lies in the ephemeral ports, and a bind over a live connection fails.
    if ! ss -Htan "sport = :$port" | grep -q .; then echo "$port"; return; fi
  done
  die "no free port between 35000 and 35200 on 127.0.0.1"
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local secs=$1 what=$2; shift 2
  local i
  for i in $(seq $((secs * 10))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.1
  done
  die "$what did not come up within ${secs}s (see $DIR/*.log)"
}

write_configs() {
  mkdir -p "$DIR/cni/conf" "$DIR/cni/ipam" "$DIR/root" "$DIR/state" "$DIR/runc" "$DIR/opt" "$DIR/registry" "$DIR/logs"
  mountpoint -q "$DIR/root" || mount -t tmpfs -o "size=$IMAGEFS_SIZE,mode=0700" atoll-testbed-imagefs "$DIR/root"
  cat >"$DIR/cni/conf/10-atoll-testbed.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "atoll-testbed",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$SUBNET", "gateway": "$GATEWAY"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
  cat >"$DIR/registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/registry
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOF
  # A second registry that wants a user name and password, for credential tests.
  htpasswd -nbB "$PRIVATE_USER" "$PRIVATE_PASSWORD" >"$DIR/htpasswd"
  cat >"$DIR/private-registry.yml" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/private-registry
http:
  addr: 127.0.0.1:$PRIVATE_PORT
auth:
  htpasswd:
    realm: atoll-testbed
    path: $DIR/htpasswd
EOF
  # Registries through hosts.toml files (config_path), which every containerd since 1.5 reads
  # and 2.x requires: the test bed's registries speak plain HTTP.
  local port
  for port in "$REGISTRY_PORT" "$PRIVATE_PORT"; do
    mkdir -p "$DIR/certs.d/127.0.0.1:$port"
    cat >"$DIR/certs.d/127.0.0.1:$port/hosts.toml" <<EOF
server = "http://127.0.0.1:$port"

[host."http://127.0.0.1:$port"]
  capabilities = ["pull", "resolve", "push"]
EOF
  done
  case "$CONTAINERD_VERSION" in
    1.*) write_containerd_v2_config ;;
    *) write_containerd_v3_config ;;
  esac
}

# containerd 1.6 and 1.7: the version 2 configuration, the CRI plugin in one section.
write_containerd_v2_config() {
  cat >"$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/root"
state = "$DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/conf"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$DIR/certs.d"
EOF
}

# containerd 2.x: the version 3 configuration, where the CRI plugin is split into images,
# runtime and the gRPC service. NRI is off: it would take the host's /var/run/nri socket.
write_containerd_v3_config() {
  cat >"$DIR/containerd.toml" <<EOF
version = 3
root = "$DIR/root"
state = "$DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$DIR/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "$DIR/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$DIR/cni/conf"
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.transfer.v1.local"]
  config_path = "$DIR/certs.d"
EOF
}

start_containerd() {
  # setsid: containerd must not share the runner's process group, so that a terminal's
  # Ctrl-C reaches the runner (which tears down in order) and not containerd directly.
  setsid containerd --config "$DIR/containerd.toml" >>"$DIR/containerd.log" 2>&1 </dev/null &
  echo $! >"$DIR/containerd.pid"
  wait_for 30 "containerd" ctr --address "$SOCK" version
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

up() {
  install_packages
  BIN=$(containerd_bin)
  export PATH="$BIN:$PATH"
  CONTAINERD_VERSION=$(containerd --version | awk '{print $3}' | sed 's/^v//')
  case "$CONTAINERD_VERSION" in
    "$CONTAINERD_WANTED".*) ;;
    *) die "wanted containerd $CONTAINERD_WANTED, $BIN/containerd is $CONTAINERD_VERSION" ;;
  esac
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)
  SOCK="$DIR/containerd.sock"
  exec 9>"$LOCK"
  if ! flock -n 9; then
    log "waiting for another test bed to finish (lock $LOCK)"
    flock -w 600 9 || die "another test bed held $LOCK for 10 minutes"
  fi
  LOCKED=1
  # A bridge left by a test bed whose runner was killed would hold the subnet.
  ip link del "$BRIDGE" >/dev/null 2>&1 || true
  REGISTRY_PORT=$(free_port)
  PRIVATE_PORT=$(free_port "$REGISTRY_PORT")
  PRIVATE_USER=robot
  PRIVATE_PASSWORD="tb-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  write_configs
  log "building images from /bin/busybox"
  mkdir -p "$DIR/images"
  build_image pause "$PAUSE_IMAGE" '["/pause"]' 'null'
  build_image busybox "$BUSYBOX_IMAGE" 'null' '["sh"]'
  PULLABLE_IMAGE="127.0.0.1:$REGISTRY_PORT/atoll/pullable:1"
  build_image pullable "$PULLABLE_IMAGE" 'null' '["httpd","-f","-p","8080","-h","/var/www"]'

  PRIVATE_IMAGE="127.0.0.1:$PRIVATE_PORT/atoll/private:1"
  build_image private "$PRIVATE_IMAGE" 'null' '["sleep","3600"]'

  docker-registry serve "$DIR/registry.yml" >"$DIR/registry.log" 2>&1 &
  echo $! >"$DIR/registry.pid"
  docker-registry serve "$DIR/private-registry.yml" >"$DIR/private-registry.log" 2>&1 &
  echo $! >"$DIR/private-registry.pid"
  start_containerd
  wait_for 15 "the image registry" bash -c "exec 3<>/dev/tcp/127.0.0.1/$REGISTRY_PORT"
  wait_for 15 "the private image registry" bash -c "exec 3<>/dev/tcp/127.0.0.1/$PRIVATE_PORT"

  ctr_ images import "$DIR/images/pause.tar" >&2
  ctr_ images import "$DIR/images/busybox.tar" >&2
  # An image of its own (another id, so removing it leaves busybox alone) that only the
  # registry holds, so a test can really pull it.
  ctr_ images import "$DIR/images/pullable.tar" >&2
  ctr_ images push --plain-http "$PULLABLE_IMAGE" >&2
  ctr_ images rm "$PULLABLE_IMAGE" >&2
  ctr_ images import "$DIR/images/private.tar" >&2
  ctr_ images push --plain-http --user "$PRIVATE_USER:$PRIVATE_PASSWORD" "$PRIVATE_IMAGE" >&2
  ctr_ images rm "$PRIVATE_IMAGE" >&2

  cat >"$DIR/env" <<EOF
ATOLL_TB_DIR=$DIR
ATOLL_TB_BIN=$BIN
ATOLL_TB_CTR=$BIN/ctr
$(counterparts_env)
ATOLL_TB_CONTAINERD_VERSION=$CONTAINERD_VERSION
ATOLL_TB_SOCKET=$SOCK
ATOLL_TB_ENDPOINT=unix://$SOCK
ATOLL_TB_LOGS=$DIR/logs
ATOLL_TB_PAUSE_IMAGE=$PAUSE_IMAGE
ATOLL_TB_BUSYBOX_IMAGE=$BUSYBOX_IMAGE
ATOLL_TB_PULLABLE_IMAGE=$PULLABLE_IMAGE
ATOLL_TB_REGISTRY=127.0.0.1:$REGISTRY_PORT
ATOLL_TB_PRIVATE_IMAGE=$PRIVATE_IMAGE
ATOLL_TB_PRIVATE_REGISTRY=127.0.0.1:$PRIVATE_PORT
ATOLL_TB_PRIVATE_USER=$PRIVATE_USER
ATOLL_TB_PRIVATE_PASSWORD=$PRIVATE_PASSWORD
ATOLL_TB_BRIDGE=$BRIDGE
ATOLL_TB_SUBNET=$SUBNET
ATOLL_TB_GATEWAY=$GATEWAY
EOF
  log "up: containerd $CONTAINERD_VERSION ($BIN) at $SOCK, registry at 127.0.0.1:$REGISTRY_PORT"
}

# use_bed_bin: put the containerd binaries of the test bed in DIR first on PATH.
use_bed_bin() {
  local bin
  bin=$(sed -n 's/^ATOLL_TB_BIN=//p' "$DIR/env" 2>/dev/null)
  [ -n "$bin" ] || return 1
  export PATH="$bin:$PATH"
}

stop_pid() { # stop_pid PIDFILE NAME
  local pidfile=$1 pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile"
}

down() {
  trap '' TERM INT # finish the teardown whatever else arrives
  [ -n "${DIR:-}" ] && [ -d "$DIR" ] || return 0
  DIR=$(cd "$DIR" && pwd)
  SOCK="$DIR/containerd.sock"
  local netns=() id ns
  if [ -S "$SOCK" ] && ctr --address "$SOCK" version >/dev/null 2>&1; then
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      ns=$(ctr_ containers info "$id" 2>/dev/null | grep -o '"/var/run/netns/[^"]*"' | tr -d '"' | head -n1 || true)
      [ -n "$ns" ] && netns+=("$ns")
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 0.3
    for id in $(ctr_ containers ls -q 2>/dev/null); do
      ctr_ tasks rm -f "$id" >/dev/null 2>&1 || true
      ctr_ containers rm "$id" >/dev/null 2>&1 || true
    done
  fi
  stop_pid "$DIR/containerd.pid"
  stop_pid "$DIR/registry.pid"
  stop_pid "$DIR/private-registry.pid"
  # hostPort rules portmap left for sandboxes that were killed rather than torn down.
  # Each is a jump from CNI-HOSTPORT-DNAT, commented with the network's name, to a chain.
  if command -v iptables >/dev/null; then
    iptables -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | grep -F 'dnat name: \"atoll-testbed\"' | while read -r rule; do
      local chain=${rule##*-j }
      eval "iptables -t nat -D ${rule#-A }" >/dev/null 2>&1 || true
      iptables -t nat -F "$chain" >/dev/null 2>&1 && iptables -t nat -X "$chain" >/dev/null 2>&1 || true
    done || true
  fi
  # Shims outlive containerd by design; those of this test bed name its socket.
  pkill -KILL -f -- "-address $SOCK" 2>/dev/null || true
  for ns in "${netns[@]}"; do
    ip netns delete "$(basename "$ns")" >/dev/null 2>&1 || umount "$ns" >/dev/null 2>&1 || true
    rm -f "$ns" 2>/dev/null || true
  done
  # The bridge is shared by name: only the holder of the lock may remove it.
  [ "${LOCKED:-0}" = 1 ] && ip link del "$BRIDGE" >/dev/null 2>&1 || true
  # Mounts under DIR (rootfs, shm, bind mounts), deepest first.
  awk -v d="$DIR/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  if [ "${ATOLL_TESTBED_KEEP:-0}" = 1 ]; then
    log "kept $DIR"
  else
    rm -rf "$DIR" 2>/dev/null || log "could not remove all of $DIR"
  fi
}

case "${1:-}" in
  install)
    install_packages
    containerd_bin >/dev/null
    counterparts_env >/dev/null
    ;;
  run)
    [ $# -eq 2 ] || die "usage: testbed.sh run DIR"
    DIR=$2
    trap down EXIT
    trap 'exit 0' TERM INT
    up
    echo "READY $DIR/env"
    # Hold the test bed until the runner closes our stdin (it exited or died) or signals.
    while read -r _; do :; done
    ;;
  down)
    [ $# -eq 2 ] || die "usage: testbed.sh down DIR"
    DIR=$2
    LOCKED=1
    use_bed_bin || true
    down
    ;;
  restart)
    [ $# -eq 2 ] || die "usage: testbed.sh restart DIR"
    DIR=$(cd "$2" && pwd)
    SOCK="$DIR/containerd.sock"
    use_bed_bin || die "$DIR/env names no ATOLL_TB_BIN"
    stop_pid "$DIR/containerd.pid"
    start_containerd
    ;;
  *) die "usage: testbed.sh install | run DIR | down DIR | restart DIR" ;;
esac
