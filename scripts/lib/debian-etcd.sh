# shellcheck shell=bash
# Debian's etcd 3.5 builds in /opt/etcd-<version>: the pinned table, and the functions
# scripts/install-deps installs them with and scripts/check-install checks them with. Sourced, not run.
#
# One row per version: version, Debian version, suite, the pinned SHA-256 of
# etcd-server_<debver>_amd64.deb and of etcd-client_<debver>_amd64.deb, and whether a missing or
# changed package fails the install (required: trixie is stable, the package stays) or is reported
# loudly and skipped (optional: sid moves, a newer upload replaces the package).
# shellcheck source=scripts/lib/etcd-dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/etcd-dir.sh"
DEBIAN_ETCD=(
  "3.5.16 3.5.16-4 trixie 0875921bb0d023f2af9b8e15cdfbe417a03e65731345fb832c40f9c2dd72967b 7eb67e305ba2ce523a5a0b29bf88750ded3f724769c7111a83382b7909f9977b required"
  "3.5.30 3.5.30-2 sid 11a4f7e350c5020b83edff5160a6063d4e56ac9cd014d21ce8916378bf96de79 1e66ad2aba4cba6842a1ac35d5c525e750102b8fb42748225bcb2e34d6595931 optional"
)
DEBIAN_ETCD_BINARIES=(etcd etcdctl etcdutl)
DEBIAN_ETCD_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

debian_etcd_dir() { echo "/opt/etcd-$1"; }

# What SOURCE holds for a directory unpacked from the pinned packages.
debian_etcd_source() {
  local debver=$1 server_sha=$2 client_sha=$3
  printf '%s  etcd-server_%s_amd64.deb\n%s  etcd-client_%s_amd64.deb\n' \
    "$server_sha" "$debver" "$client_sha" "$debver"
}

# Succeeds when /opt/etcd-<version> came from the pinned packages (SOURCE), its binaries still
# match what was unpacked (SHA256SUMS) and each reports <version>; otherwise says why on stderr.
debian_etcd_verified() {
  local version=$1 debver=$2 server_sha=$3 client_sha=$4 dir
  dir=$(debian_etcd_dir "$version")
  if [ ! -d "$dir" ]; then
    echo "$dir is missing" >&2
    return 1
  fi
  if [ "$(cat "$dir/SOURCE" 2>/dev/null)" != "$(debian_etcd_source "$debver" "$server_sha" "$client_sha")" ]; then
    echo "$dir/SOURCE does not name the pinned etcd-server and etcd-client $debver packages" >&2
    return 1
  fi
  etcd_dir_binaries_sound "$dir" "$version" "${DEBIAN_ETCD_BINARIES[@]}"
}

# apt-get with the private sources list, lists and cache under $1: the machine's apt is untouched.
debian_etcd_apt() {
  local tmp=$1
  shift
  "$@" -o Dir::Etc::SourceList="$tmp/sources.list" -o Dir::Etc::SourceParts=- \
    -o Dir::State::Lists="$tmp/lists" -o Dir::Cache="$tmp/cache" -o Acquire::Languages=none
}

# Writes the private sources list (the suites named after $1: trixie, sid) and fetches its
# package lists.
debian_etcd_update_lists() {
  local tmp=$1 suite
  shift
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
  # apt drops privileges to _apt for downloads: let it reach and write its directories.
  chmod 0755 "$tmp"
  if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then
    chown -R _apt "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/debs"
  fi
  : >"$tmp/sources.list"
  for suite in "$@"; do
    echo "deb [signed-by=$DEBIAN_ETCD_KEYRING] http://deb.debian.org/debian $suite main" >>"$tmp/sources.list"
  done
  echo "install-deps: fetching the Debian $* package lists (private apt directories, $tmp)" >&2
  debian_etcd_apt "$tmp" apt-get update -qq >&2
}

# Downloads <package>_<debver>_amd64.deb into $tmp/debs and checks its SHA-256. On failure prints
# on stdout what was found instead (the versions the suite has, or the hash the file has).
debian_etcd_fetch() {
  local tmp=$1 package=$2 debver=$3 suite=$4 want=$5 file found got
  file="$tmp/debs/${package}_${debver}_amd64.deb"
  if ! (cd "$tmp/debs" && debian_etcd_apt "$tmp" apt-get download -qq "$package=$debver" >&2); then
    found=$(debian_etcd_apt "$tmp" apt-cache madison "$package" 2>/dev/null |
      awk -F'|' -v s=" $suite/" 'index($3, s) { gsub(/ /, "", $2); print $2 }' | paste -sd, -)
    echo "Debian $suite has no $package $debver (it has: ${found:-no $package at all})"
    return 1
  fi
  got=$(sha256sum "$file" | awk '{print $1}')
  if [ "$got" != "$want" ]; then
    echo "$(basename "$file") from Debian $suite has SHA-256 $got, not the pinned $want"
    return 1
  fi
}

# Fetches, checks and unpacks one version into /opt/etcd-<version> (written beside it, then moved
# into place, then verified). On failure prints the reason on stdout. $SUDO (when set) writes /opt.
debian_etcd_install() {
  local tmp=$1 version=$2 debver=$3 suite=$4 server_sha=$5 client_sha=$6 dir x out b why
  dir=$(debian_etcd_dir "$version")
  echo "install-deps: installing etcd $version into $dir (Debian $suite, etcd-server and etcd-client $debver)" >&2
  why=$(debian_etcd_fetch "$tmp" etcd-server "$debver" "$suite" "$server_sha") || { echo "$why"; return 1; }
  why=$(debian_etcd_fetch "$tmp" etcd-client "$debver" "$suite" "$client_sha") || { echo "$why"; return 1; }
  x="$tmp/x-$version"
  rm -rf "$x"
  ${SUDO:-} rm -rf "$dir.new"
  # Called where errexit does not apply (`if ! why=$(...)`): every step is checked.
  for b in server client; do
    dpkg -x "$tmp/debs/etcd-${b}_${debver}_amd64.deb" "$x" >&2 ||
      { echo "dpkg -x etcd-${b}_${debver}_amd64.deb failed"; return 1; }
  done
  out="$tmp/out-$version"
  mkdir -p "$out/bin" || { echo "cannot create $out/bin"; return 1; }
  for b in "${DEBIAN_ETCD_BINARIES[@]}"; do
    install -m 0755 "$x/usr/bin/$b" "$out/bin/$b" >&2 ||
      { echo "the packages hold no usr/bin/$b"; return 1; }
  done
  (cd "$out" && sha256sum bin/* >SHA256SUMS) || { echo "sha256sum of the binaries failed"; return 1; }
  debian_etcd_source "$debver" "$server_sha" "$client_sha" >"$out/SOURCE"
  ${SUDO:-} cp -a "$out" "$dir.new" >&2 && ${SUDO:-} rm -rf "$dir" >&2 && ${SUDO:-} mv "$dir.new" "$dir" >&2 ||
    { echo "cannot move the unpacked files into $dir"; return 1; }
  why=$(debian_etcd_verified "$version" "$debver" "$server_sha" "$client_sha" 2>&1) || { echo "$why"; return 1; }
}
