#!/usr/bin/env bash
# Installs the Debian packages of cross/package.sh as a user installs them, each into a fresh
# Debian root file system made by debootstrap from the mirror this machine's apt uses: amd64
# natively, arm64 and armhf under qemu-user (binfmt_misc, registered from qemu-user-static's own
# configuration when it is not yet). In each root: dpkg -i, then `atoll version` and `atoll
# doctor` run, the unit is where systemd looks and enabled, the man page and completions are
# where man, bash, zsh and fish look, the configs are conffiles; then removal and purge leave
# /var/lib/atoll as it was.
#
#   cross/install-test.sh PACKAGES_DIR [ARCH...]      (default: amd64 arm64 armhf)
#
# The bookworm roots are made once and kept as tarballs under ATOLL_TESTBED_CACHE
# (/var/cache/atoll-testbed); each run unpacks a fresh copy.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: cross/install-test.sh PACKAGES_DIR [ARCH...]" >&2; exit 2; }
pkgs=$(realpath "$1")
shift
ARCHES=("$@")
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=(amd64 arm64 armhf)
CACHE=${ATOLL_TESTBED_CACHE:-/var/cache/atoll-testbed}
SUITE=bookworm
log() { echo "install-test: $*" >&2; }
die() { log "FAIL: $*"; exit 1; }
. tests/testbed/mirror.sh

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# A pristine root for ARCH, as a tarball in the cache: sets $tarball, and $made to how it came.
pristine() {
  local arch=$1 start=$SECONDS
  tarball=$CACHE/debootstrap-$SUITE-$1.tar
  made="from the cache"
  if [ ! -s "$tarball" ]; then
    local mirror keyring dir
    read -r mirror keyring < <(debian_mirror)
    dir=$(mktemp -d)
    log "debootstrap $SUITE $arch from $mirror"
    if [ "$arch" = "$(dpkg --print-architecture)" ]; then
      debootstrap --variant=minbase --include=systemd --keyring="$keyring" "$SUITE" "$dir" "$mirror" >&2
    else
      debootstrap --foreign --arch="$arch" --variant=minbase --include=systemd --keyring="$keyring" "$SUITE" "$dir" "$mirror" >&2
      chroot "$dir" /debootstrap/debootstrap --second-stage >&2
    fi
    mkdir -p "$CACHE"
    tar -C "$dir" -cf "$tarball.new" . && mv "$tarball.new" "$tarball"
    rm -rf "$dir"
    made="by debootstrap in $((SECONDS - start)) s"
  fi
}

# ARM binaries in a chroot: the kernel hands them to qemu (the F flag: the interpreter is
# opened once, here, so the root needs no copy of it).
binfmt() {
  local name=qemu-$1
  [ -e "/proc/sys/fs/binfmt_misc/$name" ] && return
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  [ -e "/proc/sys/fs/binfmt_misc/$name" ] || cat "/usr/lib/binfmt.d/$name.conf" >/proc/sys/fs/binfmt_misc/register
}

check() {
  local arch=$1 target=$2 deb root version out
  deb=$(ls "$pkgs"/atoll_*_"$arch".deb) || die "no $arch package in $pkgs"
  version=$(dpkg-deb -f "$deb" Version)
  pristine "$arch"
  local start=$SECONDS
  root=$(mktemp -d)
  trap "umount '$root/proc' 2>/dev/null || true; rm -rf --one-file-system '$root'" RETURN
  tar -C "$root" -xf "$tarball"
  mount -t proc proc "$root/proc"
  in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C "$@"; }

  cp "$deb" "$root/tmp/atoll.deb"
  in_root dpkg -i /tmp/atoll.deb >&2 || die "$arch: dpkg -i failed"
  out=$(in_root atoll version) || die "$arch: atoll version failed"
  grep -qx "atoll $version" <<<"$out" && grep -qx "target: $target" <<<"$out" || die "$arch: atoll version said: $out"
  # doctor runs and names what is missing in a bare root (the runtime); it fails for that.
  out=$(in_root atoll doctor 2>&1) && die "$arch: doctor found a runtime in a bare root: $out"
  grep -q "failed" <<<"$out" && grep -qi "containerd" <<<"$out" || die "$arch: doctor said: $out"
  [ -f "$root/usr/lib/systemd/system/atoll.service" ] || die "$arch: no unit where systemd looks"
  out=$(in_root systemctl is-enabled atoll.service || true)
  [ "$out" = enabled ] || die "$arch: atoll.service is '$out', not enabled"
  grep -q "^ExecStart=/usr/bin/atoll run --config=/etc/atoll/kubelet.yaml" "$root/usr/lib/systemd/system/atoll.service" ||
    die "$arch: the unit does not run the installed binary with the installed configs"
  for f in usr/share/bash-completion/completions/atoll usr/share/zsh/vendor-completions/_atoll \
    usr/share/fish/vendor_completions.d/atoll.fish usr/share/man/man8/atoll.8.gz usr/share/man/man5/atoll-config.5.gz; do
    [ -s "$root/$f" ] || die "$arch: no /$f"
  done
  out=$(in_root dpkg-query -W -f='${Conffiles}' atoll)
  grep -q "/etc/atoll/atoll.yaml" <<<"$out" && grep -q "/etc/atoll/kubelet.yaml" <<<"$out" || die "$arch: conffiles: $out"
  in_root atoll validate /etc/kubernetes/manifests --hostname-override=box >&2 || die "$arch: validate of the empty manifest directory failed"

  # What atoll made while it ran stays through removal and purge (its pods use it).
  mkdir -p "$root/var/lib/atoll/pods/0f1e2d/volumes"
  echo state >"$root/var/lib/atoll/pods/0f1e2d/volumes/data"
  in_root dpkg -r atoll >&2 || die "$arch: dpkg -r failed"
  [ ! -e "$root/usr/bin/atoll" ] || die "$arch: the binary outlived removal"
  [ -f "$root/etc/atoll/atoll.yaml" ] || die "$arch: removal took the conffiles (only purge does)"
  in_root dpkg -P atoll >&2 || die "$arch: dpkg -P failed"
  [ ! -e "$root/etc/atoll/atoll.yaml" ] || die "$arch: purge left the conffiles"
  [ "$(cat "$root/var/lib/atoll/pods/0f1e2d/volumes/data")" = state ] || die "$arch: /var/lib/atoll was touched"
  log "$arch: installed, ran version, doctor and validate, enabled; removed and purged with /var/lib/atoll left alone"
  echo "install $arch: root $made; unpacked, installed, checked and removed in $((SECONDS - start)) s"
}

for arch in "${ARCHES[@]}"; do
  case "$arch" in
    amd64) check amd64 x86_64-unknown-linux-musl ;;
    arm64) binfmt aarch64 && check arm64 aarch64-unknown-linux-musl ;;
    armhf) binfmt arm && check armhf armv7-unknown-linux-musleabihf ;;
    *) die "unknown architecture $arch" ;;
  esac
done
