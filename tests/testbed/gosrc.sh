# Sourced by tests/testbed/testbed.sh. Needs CACHE, log(), die() and private_apt (mirror.sh).
#
# Real Go counterparts built from Debian's packaged sources, offline apart from the Debian
# archive: the konnectivity server and agent (apiserver-network-proxy's cmd/server and
# cmd/agent, "proxy-server" and "proxy-agent") and the repository's own Go checkers
# (tests/k8scheck: atoll's API requests judged by k8s.io/api's and apimachinery's own code).
#
# Debian unstable's golang-k8s-sigs-apiserver-network-proxy-dev and every golang-* package below
# it (the Go compiler, golang-1.NN-go and -src, among them; k8s.io/api, apimachinery, client-go,
# grpc) are downloaded through a private apt configuration on the mirror this machine's apt
# uses (the system's packages and lists are untouched), unpacked with dpkg-deb -x into
# $CACHE/gosrc/root, and built in GOPATH mode (GO111MODULE=off, GOPROXY=off), as Debian's own
# dh-golang builds do. Nothing is patched. Later runs need no network: the tree and the
# binaries stay in the cache; a checker is built again when its source changes.
# $CACHE/gosrc/VERSIONS says which versions were built (docs/src/guides/konnectivity.md cites it).

GOSRC_SUITE=sid
GOSRC_PACKAGES=(golang-k8s-sigs-apiserver-network-proxy-dev golang-k8s-api-dev golang-k8s-apimachinery-dev
  golang-k8s-sigs-json-dev golang-github-evanphx-json-patch-dev)

# gosrc_root: the unpacked tree (GOROOT under usr/lib/go-1.NN, GOPATH usr/share/gocode).
gosrc_root() {
  local top="$CACHE/gosrc"
  if [ -s "$top/root.done" ] && [ -d "$top/root/usr/share/gocode/src" ]; then
    echo "$top/root"
    return
  fi
  command -v apt-get >/dev/null || die "the konnectivity server is built from Debian's Go packages: apt-get is needed"
  local mirror apt="$top/apt"
  mirror=$(private_apt_init "$apt" "$GOSRC_SUITE")
  log "fetching the Go sources of apiserver-network-proxy and k8s.io/api from Debian $GOSRC_SUITE at $mirror"
  private_apt "$apt" apt-get update >&2 || die "apt-get update of Debian $GOSRC_SUITE failed"
  # Every golang-* package the set depends on, recursively (the -dev packages are Arch: all;
  # the compiler comes with them). Meta packages that only pick a compiler are left out.
  local pkgs
  pkgs=$(private_apt "$apt" apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${GOSRC_PACKAGES[@]}" |
    grep -v '^[ <]' | grep '^golang-' | sort -u |
    grep -Ev '^(golang-go|golang-any|golang-src|golang-golang-x-tools)$') || die "resolving the Go packages failed"
  local gover
  gover=$(echo "$pkgs" | grep -E '^golang-1\.[0-9]+-go$' | sort -V | tail -n1)
  [ -n "$gover" ] || die "no golang-1.NN-go among the dependencies of ${GOSRC_PACKAGES[*]}"
  pkgs="$pkgs ${gover%-go}-src"
  # shellcheck disable=SC2086
  (cd "$apt/deb" && private_apt "$apt" apt-get download $pkgs >&2) || die "downloading Debian's Go packages failed"
  rm -rf "$top/root" "$top/root.done" && mkdir -p "$top/root"
  local deb
  for deb in "$apt"/deb/*.deb; do dpkg-deb -x "$deb" "$top/root"; done
  for deb in "$apt"/deb/*.deb; do dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"; done | sort >"$top/root.done"
  rm -rf "$apt"
  log "$(wc -l <"$top/root.done") Go packages unpacked in $top/root"
  echo "$top/root"
}

# go_build OUT DIR: builds the Go main package in DIR (a path under GOPATH/src, or a directory
# of the repository) into OUT, offline.
go_build() {
  local out=$1 dir=$2 root goroot
  root=$(gosrc_root)
  goroot=$(ls -d "$root"/usr/lib/go-1.* | sort -V | tail -n1)
  [ -x "$goroot/bin/go" ] || die "no Go compiler in $root"
  (
    export GOROOT=$goroot GOPATH=$root/usr/share/gocode GOCACHE=$CACHE/gosrc/gocache
    export GO111MODULE=off GOTOOLCHAIN=local GOPROXY=off GOFLAGS= GOENV=off CGO_ENABLED=0 GOWORK=off
    case "$dir" in /*) cd "$dir" ;; *) cd "$GOPATH/src/$dir" ;; esac
    nice -n 10 "$GOROOT/bin/go" build -trimpath -o "$out.new" . && mv -f "$out.new" "$out"
  ) >&2 || die "go build of $dir failed"
}

# konnectivity_bin server|agent: the path of the built proxy-server or proxy-agent.
konnectivity_bin() {
  local out="$CACHE/gosrc/bin/proxy-$1"
  if [ ! -x "$out" ]; then
    mkdir -p "$CACHE/gosrc/bin"
    log "building the konnectivity $1 (proxy-$1) from Debian's sources"
    go_build "$out" "sigs.k8s.io/apiserver-network-proxy/cmd/$1"
    {
      grep -E '^(golang-k8s-sigs-apiserver-network-proxy-dev|golang-1\.[0-9]+-go|golang-google-grpc-dev|golang-k8s-api-dev) ' "$CACHE/gosrc/root.done"
      for f in "$CACHE"/gosrc/bin/proxy-*; do echo "sha256 $(basename "$f") $(sha256sum "$f" | cut -d' ' -f1)"; done
    } >"$CACHE/gosrc/VERSIONS"
  fi
  echo "$out"
}

# go_checker NAME: the repository's tests/NAME built (again when its source changed).
go_checker() {
  local src out sum
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/$1"
  out="$CACHE/gosrc/bin/$1"
  [ -d "$src" ] || { echo ""; return; }
  sum=$(cat "$src"/*.go | sha256sum | cut -d' ' -f1)
  if [ ! -x "$out" ] || [ "$(cat "$out.sum" 2>/dev/null)" != "$sum" ]; then
    mkdir -p "$CACHE/gosrc/bin"
    log "building tests/$1 against Debian's k8s.io sources"
    go_build "$out" "$src"
    echo "$sum" >"$out.sum"
  fi
  echo "$out"
}
