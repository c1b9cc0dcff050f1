#!/usr/bin/env bash
# Release artifacts from the cross-built binaries, into OUT:
#   atoll-VERSION-TARGET.tar.gz     the binary, the systemd unit, the default configs, the man
#                                   pages (atoll(8), atoll-config(5)) and the bash, zsh and fish completions
#   atoll_VERSION_ARCH.deb          the same as a Debian package (arm64, armhf, amd64)
#   atoll-VERSION-TARGET.cdx.json   a CycloneDX SBOM: every crate in the binary, its version,
#                                   licence and checksum (cross/sbom.py)
#   SHA256SUMS, SHA256SUMS.minisig  checksums of all of the above, signed with minisign
#                                   (the public key is never put here: docs/src/operations/installing.md says how to get it)
# The man page and completions come from the command and flag tables (examples/docs.rs); each
# binary carries its dependency list in cargo-auditable's format (cross/release.sh).
#
#   cross/package.sh OUT [TARGET...]
#
# ATOLL_RELEASE_KEY: the release's minisign secret key to sign with (made without a password,
# `minisign -G -W`). Without it the script refuses to start, unless ATOLL_RELEASE_UNSIGNED=1
# asks for an unsigned build (CI, benchmarks): then OUT holds no signature and no key. A
# signature by a key made on the spot would verify against whatever public key travels with
# it, which proves nothing.
# ATOLL_PACKAGE_PREBUILT=1: package target/cross/atoll-TARGET as they are (no build).
#
# Reproducible: every file's time is the commit's (SOURCE_DATE_EPOCH), owners are root,
# archives list their members sorted, gzip stores no name or time, the SBOM's serial number
# comes from the commit, and the binaries are built from the locked dependencies with nothing
# of the build directory in them.
set -euo pipefail
cd "$(dirname "$0")/.."

[ $# -ge 1 ] || { echo "usage: cross/package.sh OUT [TARGET...]" >&2; exit 2; }
out=$(realpath -m "$1")
shift
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(aarch64-unknown-linux-musl armv7-unknown-linux-musleabihf x86_64-unknown-linux-musl)
say() { echo "package: $*" >&2; }

# The key first: nothing is built for a release that could not be signed.
key=${ATOLL_RELEASE_KEY:-}
unsigned=${ATOLL_RELEASE_UNSIGNED:-0}
if [ -n "$key" ] && [ "$unsigned" = 1 ]; then
  say "both ATOLL_RELEASE_KEY and ATOLL_RELEASE_UNSIGNED=1 are set: unset one"; exit 2
elif [ -n "$key" ]; then
  [ -r "$key" ] || { say "ATOLL_RELEASE_KEY=$key: no such readable file"; exit 2; }
  key=$(realpath "$key")
elif [ "$unsigned" != 1 ]; then
  say "ATOLL_RELEASE_KEY is not set: set it to the release's minisign secret key, or set ATOLL_RELEASE_UNSIGNED=1 for an unsigned build"
  exit 2
fi

command -v minisign >/dev/null && command -v dpkg-deb >/dev/null || {
  say "installing minisign"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends minisign dpkg >&2
}
[ "${ATOLL_PACKAGE_PREBUILT:-0}" = 1 ] || bash cross/build.sh "${TARGETS[@]}" >&2

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
commit=$(git rev-parse HEAD)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export TZ=UTC LC_ALL=C.UTF-8
day=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The documents every artifact holds.
cargo build -q --locked --example docs >&2
docs=$work/docs
mkdir -p "$docs"
target/debug/examples/docs man "$version" "$day" | gzip -9n >"$docs/atoll.8.gz"
target/debug/examples/docs config-man "$version" "$day" | gzip -9n >"$docs/atoll-config.5.gz"
for shell in bash zsh fish; do target/debug/examples/docs "$shell" >"$docs/atoll.$shell"; done
sed 's|^ExecStart=.*|ExecStart=/usr/bin/atoll run --config=/etc/atoll/kubelet.yaml --atoll-config=/etc/atoll/atoll.yaml|;
     s|^# atoll as a system service\. Install the binary as /usr/local/bin/atoll, then:|# atoll as a system service (the package installs and enables it).|;
     /^#   cp systemd\/atoll.service/d;
     /^# Add --atoll-config=/d; /^# classes and registry credentials\.$/d' systemd/atoll.service >"$docs/atoll.service"
cat >"$docs/kubelet.yaml" <<'EOF'
# The KubeletConfiguration atoll runs with (atoll.service: --config=/etc/atoll/kubelet.yaml).
# Field names are kubelet's; `atoll validate` and the agent's log name any it does not act on.
# To use a kubelet's own file instead, point --config at it in a drop-in:
#   systemctl edit atoll
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Pods: every manifest in this directory (and, with staticPodURL, from a URL).
staticPodPath: /etc/kubernetes/manifests
EOF
cp configs/atoll.yaml "$docs/atoll.yaml"

# A tree's files all at the commit's time.
settle() { find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +; }

for t in "${TARGETS[@]}"; do
  case "$t" in
    aarch64-*) arch=arm64 ;;
    armv7-*) arch=armhf ;;
    x86_64-*) arch=amd64 ;;
    *) say "unknown target $t"; exit 2 ;;
  esac
  bin=target/cross/atoll-$t
  [ -x "$bin" ] || { say "no $bin: build it first (cross/build.sh $t)"; exit 1; }

  # The Debian package.
  root=$work/deb-$arch
  install -D -m 0755 "$bin" "$root/usr/bin/atoll"
  install -D -m 0644 "$docs/atoll.service" "$root/usr/lib/systemd/system/atoll.service"
  install -D -m 0644 "$docs/kubelet.yaml" "$root/etc/atoll/kubelet.yaml"
  install -D -m 0644 "$docs/atoll.yaml" "$root/etc/atoll/atoll.yaml"
  install -d -m 0755 "$root/etc/kubernetes/manifests"
  install -D -m 0644 "$docs/atoll.8.gz" "$root/usr/share/man/man8/atoll.8.gz"
  install -D -m 0644 "$docs/atoll-config.5.gz" "$root/usr/share/man/man5/atoll-config.5.gz"
  install -D -m 0644 "$docs/atoll.bash" "$root/usr/share/bash-completion/completions/atoll"
  install -D -m 0644 "$docs/atoll.zsh" "$root/usr/share/zsh/vendor-completions/_atoll"
  install -D -m 0644 "$docs/atoll.fish" "$root/usr/share/fish/vendor_completions.d/atoll.fish"
  install -d -m 0755 "$root/usr/share/doc/atoll"
  cp cross/debian/copyright "$root/usr/share/doc/atoll/copyright"
  # A static binary is the point of the package (no library to match on the box).
  install -D -m 0644 cross/debian/lintian-overrides "$root/usr/share/lintian/overrides/atoll"
  printf 'atoll (%s) unstable; urgency=medium\n\n  * Release %s (commit %s).\n\n -- atoll maintainers <maintainers@atoll.example.org>  %s\n' \
    "$version" "$version" "${commit:0:12}" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")" | gzip -9n >"$root/usr/share/doc/atoll/changelog.gz"
  install -d -m 0755 "$root/DEBIAN"
  size=$(du -k -s --apparent-size --exclude=DEBIAN "$root" | cut -f1)
  sed "s/@VERSION@/$version/; s/@ARCH@/$arch/; s/@SIZE@/$size/" cross/debian/control >"$root/DEBIAN/control"
  printf '/etc/atoll/atoll.yaml\n/etc/atoll/kubelet.yaml\n' >"$root/DEBIAN/conffiles"
  for script in postinst prerm postrm; do install -m 0755 "cross/debian/$script" "$root/DEBIAN/$script"; done
  (cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
  chmod 0644 "$root/DEBIAN/md5sums" "$root/DEBIAN/control" "$root/DEBIAN/conffiles"
  settle "$root"
  dpkg-deb --root-owner-group -Zxz -z9 -Sextreme --build "$root" "$out/atoll_${version}_${arch}.deb" >&2

  # The tarball: the same files, under one directory.
  name=atoll-$version-$t
  tree=$work/$name
  install -D -m 0755 "$bin" "$tree/atoll"
  install -m 0644 "$docs/atoll.service" "$docs/kubelet.yaml" "$docs/atoll.yaml" "$docs/atoll.8.gz" "$docs/atoll-config.5.gz" "$tree/"
  install -D -m 0644 "$docs/atoll.bash" "$tree/completions/atoll.bash"
  install -m 0644 "$docs/atoll.zsh" "$tree/completions/_atoll"
  install -m 0644 "$docs/atoll.fish" "$tree/completions/atoll.fish"
  install -m 0644 README.md cross/debian/copyright "$tree/"
  settle "$tree"
  tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --format=gnu -cf - "$name" | gzip -9n >"$out/$name.tar.gz"

  python3 cross/sbom.py "$t" "$version" "$commit" >"$out/$name.cdx.json"
  say "$t: $(stat -c %s "$out/atoll_${version}_${arch}.deb") bytes as .deb, $(stat -c %s "$out/$name.tar.gz") as .tar.gz"
done

# Checksums of everything, signed. What an earlier run left (a signature, the public key of a
# throwaway key older versions of this script made) goes first.
(cd "$out" && rm -f SHA256SUMS SHA256SUMS.minisig atoll-release.pub && sha256sum -- *.deb *.tar.gz *.cdx.json >SHA256SUMS)
if [ -n "$key" ]; then
  minisign -S -s "$key" -m "$out/SHA256SUMS" -t "atoll $version SHA256SUMS (commit $commit)" >/dev/null
else
  say "ATOLL_RELEASE_UNSIGNED=1: SHA256SUMS is not signed (not a release)"
fi
say "done: $(ls "$out" | tr '\n' ' ')"
