# shellcheck shell=bash
# etcd built from its Go modules into /opt/etcd-<version>: the pinned versions, and the functions
# scripts/install-deps builds and installs them with and scripts/check-install checks them with.
# Sourced, not run.
#
# Each pinned version has a Go module of its own in build/etcd/v<version>: go.mod requires
# go.etcd.io/etcd/server/v3, etcdctl/v3 and etcdutl/v3 at that version and names their main
# packages as `tool`s (so `go mod tidy` keeps them, with no Go file in the module); go.sum holds
# the checksums of every module the build reads, so a module the proxy serves changed fails the
# build. `go install go.etcd.io/etcd/...@v3.x.y` refuses these modules because their go.mod
# files carry `replace` directives (to etcd's own repository layout); a `replace` applies only in
# the main module, so here the requirements resolve from the proxy as they are, to the same
# versions etcd's own go.mod files pin. The go line is that of etcd's modules (1.26.0), which
# also sets the binaries' GODEBUG defaults as etcd's own builds have them.
#
# The binaries: `etcd` is the main package go.etcd.io/etcd/server/v3 (server/main.go, in 3.5 as in
# 3.6 and 3.7; the root module go.etcd.io/etcd/v3 is not needed), `etcdctl` is
# go.etcd.io/etcd/etcdctl/v3 and `etcdutl` is go.etcd.io/etcd/etcdutl/v3. They are built as etcd's
# scripts/build.sh builds them: CGO_ENABLED=0 (static), -trimpath. etcd's script also sets
# go.etcd.io/etcd/api/v3/version.GitSHA from `git rev-parse`; the module zips carry no commit, so
# `etcd --version` says `Git SHA: Not provided`; `go version -m <binary>` lists every module the
# binary was built from, with its checksum.
#
# A build goes into a per-machine cache, ${XDG_CACHE_HOME:-~/.cache}/etcd-static-operator/
# etcd-go/<version>-<key>, where the key is a hash of the recipe (go_etcd_recipe: the version, the
# sha256 of go.mod and go.sum, `go version`, GOAMD64 and the build command); a changed recipe
# builds again, into a new directory, and the old ones of that version are removed. Then it is
# copied into /opt/etcd-<version> (written beside it as /opt/etcd-<version>.new, then moved into
# place). Both hold bin/{etcd,etcdctl,etcdutl}, SOURCE (the recipe and its key) and SHA256SUMS.
# The modules are downloaded into the Go module cache (`go env GOMODCACHE`) and compiled
# through the Go build cache (`go env GOCACHE`), which stay.
#
# The versions (2026-12-07): 3.5.36, the newest 3.5 the proxy lists (`go list -m -versions
# go.etcd.io/etcd/server/v3`; Debian's 3.5.16 and 3.5.30 in scripts/lib/debian-etcd.sh stay as
# they are), 3.6.16 and 3.7.3. To pin another version V, in build/etcd/vV: `go mod init
# etcd-static-operator/build/etcd/etcd-V`, `go mod edit -go=<the go line of etcd's server/v3 go.mod
# at V>`, `go get -tool go.etcd.io/etcd/server/v3@vV go.etcd.io/etcd/etcdctl/v3@vV
# go.etcd.io/etcd/etcdutl/v3@vV`, `go mod tidy`; then add V below.
# shellcheck source=scripts/lib/etcd-dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/etcd-dir.sh"
GO_ETCD_VERSIONS=(3.5.36 3.6.16 3.7.3)
# The default etcd of the operator's image (manifests/04-deployment.yaml ETCD_IMAGE), the sandbox
# and the tests: the one version `scripts/install-deps --for main` builds.
GO_ETCD_DEFAULT=3.6.16
GO_ETCD_BINARIES=(etcd etcdctl etcdutl)
GO_ETCD_MODULES=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/etcd
GO_ETCD_CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/etcd-static-operator/etcd-go
# What every build runs with: no C (static binaries, as etcd releases them), go.mod and go.sum
# as committed (-mod=readonly: nothing resolved anew), no go.work from a directory above, and no
# GOFLAGS of the caller's (a -race or -tags there would change the binaries behind the key).
GO_ETCD_ENV=(CGO_ENABLED=0 GOFLAGS=-mod=readonly GOWORK=off)
GO_ETCD_BUILD_FLAGS=(-trimpath)

go_etcd_dir() { echo "/opt/etcd-$1"; }
go_etcd_module() { echo "$GO_ETCD_MODULES/v$1"; }

# The main package of binary $1.
go_etcd_package() {
  case $1 in
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    etcdctl) echo go.etcd.io/etcd/etcdctl/v3 ;;
    etcdutl) echo go.etcd.io/etcd/etcdutl/v3 ;;
  esac
}

# The go command in version $1's module directory, with the build's environment. GOTOOLCHAIN is
# `local` unless the caller sets it: the Go on PATH builds, or the build says why it cannot.
go_etcd_go() {
  local version=$1
  shift
  (cd "$(go_etcd_module "$version")" &&
    env "${GO_ETCD_ENV[@]}" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" go "$@")
}

# Succeeds when the Go that would build version $1 is new enough for its module's go line;
# otherwise says on stdout what is missing and what to do.
go_etcd_toolchain_ok() {
  local version=$1 mod need have
  mod=$(go_etcd_module "$version")
  if ! command -v go >/dev/null; then
    echo "no \`go\` on PATH: etcd $version is built from its Go modules with Go $(sed -n 's/^go //p' "$mod/go.mod") or newer"
    return 1
  fi
  need=$(sed -n 's/^go //p' "$mod/go.mod")
  if [ -z "$need" ]; then
    echo "$mod/go.mod is missing or has no go line"
    return 1
  fi
  have=$(go_etcd_go "$version" env GOVERSION 2>/dev/null)
  have=${have#go}
  if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "etcd $version needs Go $need or newer (the go line of etcd's own modules, copied into" \
      "$mod/go.mod), and this machine's go is ${have:-unknown} (GOTOOLCHAIN=${GOTOOLCHAIN:-local}):" \
      "install Go $need or newer on PATH, or set GOTOOLCHAIN=go$need to let the go command fetch that toolchain"
    return 1
  fi
}

# How version $1 is built, one line per input; its hash is the key. Prints nothing and fails
# when the go command does.
go_etcd_recipe() {
  local version=$1 mod b goversion goamd64
  mod=$(go_etcd_module "$version")
  goversion=$(go_etcd_go "$version" version) || return 1
  goamd64=$(go_etcd_go "$version" env GOAMD64) || return 1
  echo "etcd $version, built from its Go modules (scripts/lib/go-etcd.sh)"
  echo "module build/etcd/v$version: go.mod sha256 $(sha256sum <"$mod/go.mod" | cut -d' ' -f1)," \
    "go.sum sha256 $(sha256sum <"$mod/go.sum" | cut -d' ' -f1)"
  echo "toolchain: $goversion, GOAMD64=$goamd64"
  for b in "${GO_ETCD_BINARIES[@]}"; do
    echo "bin/$b: ${GO_ETCD_ENV[*]} go build ${GO_ETCD_BUILD_FLAGS[*]} $(go_etcd_package "$b")"
  done
}

# The key of a recipe on stdin: the first 16 hex digits of its SHA-256.
go_etcd_key_of() { sha256sum | cut -c1-16; }

# What SOURCE holds for a build of recipe $1: the recipe, then its key.
go_etcd_source() { printf '%s\nkey: %s\n' "$1" "$(go_etcd_key_of <<<"$1")"; }

# Succeeds when directory $3 holds version $1 built from recipe $2 (SOURCE names the recipe and
# its key), its binaries are the ones built (SHA256SUMS) and each reports $1; otherwise says why
# on stderr.
go_etcd_dir_sound() {
  local version=$1 recipe=$2 dir=$3
  if [ ! -d "$dir" ]; then
    echo "$dir is missing" >&2
    return 1
  fi
  if [ "$(cat "$dir/SOURCE" 2>/dev/null)" != "$(go_etcd_source "$recipe")" ]; then
    echo "$dir/SOURCE does not name this build of etcd $version (key $(go_etcd_key_of <<<"$recipe");" \
      "SOURCE says $(sed -n 's/^key: //p' "$dir/SOURCE" 2>/dev/null | grep . || echo nothing))" >&2
    return 1
  fi
  etcd_dir_binaries_sound "$dir" "$version" "${GO_ETCD_BINARIES[@]}"
}

# Succeeds when /opt/etcd-<version> is sound and built from today's recipe (the committed module,
# this machine's Go); otherwise says why on stderr.
go_etcd_verified() {
  local version=$1 why recipe
  if ! why=$(go_etcd_toolchain_ok "$version"); then
    echo "$why" >&2
    return 1
  fi
  recipe=$(go_etcd_recipe "$version") || { echo "go cannot describe the build of etcd $version" >&2; return 1; }
  go_etcd_dir_sound "$version" "$recipe" "$(go_etcd_dir "$version")"
}

# Builds version $1 into the cache unless a sound build of today's recipe is there; prints the
# cache directory on stdout, and on failure the reason. Compiler output goes to stderr.
go_etcd_build() {
  local version=$1 why recipe key cache new b
  why=$(go_etcd_toolchain_ok "$version") || { echo "$why"; return 1; }
  recipe=$(go_etcd_recipe "$version") || { echo "go cannot describe the build of etcd $version"; return 1; }
  key=$(go_etcd_key_of <<<"$recipe")
  cache="$GO_ETCD_CACHE/$version-$key"
  if go_etcd_dir_sound "$version" "$recipe" "$cache" 2>/dev/null; then
    echo "$cache"
    return 0
  fi
  echo "install-deps: building etcd $version from its Go modules into $cache (once per machine and recipe)" >&2
  new="$cache.new"
  rm -rf "$new"
  mkdir -p "$new/bin" || { echo "cannot create $new/bin"; return 1; }
  # Called where errexit does not apply (`if ! why=$(...)`): every step is checked.
  for b in "${GO_ETCD_BINARIES[@]}"; do
    go_etcd_go "$version" build "${GO_ETCD_BUILD_FLAGS[@]}" -o "$new/bin/$b" "$(go_etcd_package "$b")" >&2 ||
      { echo "go build of $(go_etcd_package "$b") v$version failed (its output is above)"; return 1; }
  done
  (cd "$new" && sha256sum bin/* >SHA256SUMS) || { echo "sha256sum of the binaries failed"; return 1; }
  go_etcd_source "$recipe" >"$new/SOURCE"
  why=$(go_etcd_dir_sound "$version" "$recipe" "$new" 2>&1) || { echo "$why"; return 1; }
  if ! { rm -rf "$cache" && mv "$new" "$cache"; }; then
    echo "cannot move the build into $cache"
    return 1
  fi
  # Earlier recipes of this version are of no further use.
  for b in "$GO_ETCD_CACHE/$version"-*; do
    [ "$b" = "$cache" ] || rm -rf "$b"
  done
  echo "$cache"
}

# Builds version $1 (or takes the cached build) and installs it into /opt/etcd-<version>, written
# beside it, then moved into place, then verified. On failure prints the reason on stdout. $SUDO
# (when set) writes /opt.
go_etcd_install() {
  local version=$1 dir cache why
  dir=$(go_etcd_dir "$version")
  cache=$(go_etcd_build "$version") || { echo "$cache"; return 1; }
  echo "install-deps: installing etcd $version into $dir (from $cache)" >&2
  if ! { ${SUDO:-} rm -rf "$dir.new" && ${SUDO:-} cp -a "$cache" "$dir.new" &&
    ${SUDO:-} rm -rf "$dir" && ${SUDO:-} mv "$dir.new" "$dir"; } >&2; then
    echo "cannot copy $cache into $dir"
    return 1
  fi
  why=$(go_etcd_verified "$version" 2>&1) || { echo "$why"; return 1; }
}
