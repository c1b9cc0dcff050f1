# Sourced by tests/testbed/testbed.sh and cross/install-test.sh. Needs die().
# The Debian mirror and keyring this machine's apt is configured with, as "URI KEYRING": the
# first source of the main archive (not -security, not -updates) in deb822 or one-line form.
debian_mirror() {
  local f found=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    found=$(awk 'BEGIN { RS = ""; FS = "\n" }
      {
        uri = ""; suites = ""; key = ""; deb = 0
        for (i = 1; i <= NF; i++) {
          line = $i
          if (line ~ /^#/) continue
          if (line ~ /^Types:/ && line ~ /(^|[ \t:])deb([ \t]|$)/) deb = 1
          if (line ~ /^URIs:/) { split(substr(line, 6), u, " "); uri = u[1] }
          if (line ~ /^Suites:/) suites = substr(line, 8)
          if (line ~ /^Signed-By:/) { key = substr(line, 11); gsub(/^[ \t]+|[ \t]+$/, "", key) }
        }
        if (deb && uri != "" && suites !~ /-security/ && uri !~ /security/) { print uri, key; exit }
      }' "$f")
    [ -n "$found" ] && break
  done
  if [ -z "$found" ] && [ -f /etc/apt/sources.list ]; then
    found=$(awk '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($i !~ /security/ && $(i + 1) !~ /-(security|updates|backports)$/) { print $i; exit }
      }' /etc/apt/sources.list)
  fi
  [ -n "$found" ] || die "no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources"
  set -- $found
  local keyring=${2:-}
  case "$keyring" in /*) ;; *) keyring=/usr/share/keyrings/debian-archive-keyring.gpg ;; esac
  echo "$1 $keyring"
}

# private_apt_init DIR SUITE: an apt configuration of its own under DIR (sources, lists, cache,
# status, and DIR/deb for downloads) for Debian SUITE on this machine's mirror, which it prints;
# the system's sources, lists and packages are untouched. private_apt DIR apt-get|apt-cache
# ARGS... runs apt with it.
private_apt_init() {
  local dir=$1 suite=$2 mirror keyring
  read -r mirror keyring < <(debian_mirror)
  rm -rf "$dir" && mkdir -p "$dir/sources" "$dir/lists/partial" "$dir/cache" "$dir/archives/partial" "$dir/empty" "$dir/deb"
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' "$mirror" "$suite" "$keyring" >"$dir/sources/debian.sources"
  : >"$dir/status"
  echo "$mirror"
}

private_apt() {
  local dir=$1 tool=$2
  shift 2
  "$tool" -q -o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$dir/sources" \
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=$dir/empty" \
    -o "Dir::State::Lists=$dir/lists" -o "Dir::State::Status=$dir/status" -o "Dir::Cache=$dir/cache" \
    -o "Dir::Cache::Archives=$dir/archives" -o "APT::Sandbox::User=root" -o "Acquire::Languages=none" \
    -o "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false" \
    -o "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false" "$@"
}
