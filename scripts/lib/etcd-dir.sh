# shellcheck shell=bash
# What every /opt/etcd-<version> directory is checked for, whoever filled it (Debian's packages,
# scripts/lib/debian-etcd.sh; etcd's Go modules, scripts/lib/go-etcd.sh). Sourced, not run.

# The version line a binary prints: `etcd --version`, `etcdctl version`, `etcdutl version` (the
# same from 3.5 to 3.7).
etcd_reported() {
  local bin=$1
  case "$(basename "$bin")" in
    etcd) "$bin" --version 2>/dev/null | sed -n 's/^etcd Version: //p' ;;
    etcdctl) "$bin" version 2>/dev/null | sed -n 's/^etcdctl version: //p' ;;
    etcdutl) "$bin" version 2>/dev/null | sed -n 's/^etcdutl version: //p' ;;
  esac
}

# Succeeds when the binaries of directory $1 still match its SHA256SUMS (made when it was
# filled) and each of bin/<$3...> reports version $2; otherwise says why on stderr.
etcd_dir_binaries_sound() {
  local dir=$1 version=$2 b got
  shift 2
  if ! (cd "$dir" && sha256sum --check --quiet --strict SHA256SUMS >/dev/null 2>&1); then
    echo "$dir: binaries differ from what was put there (sha256sum --check SHA256SUMS fails)" >&2
    return 1
  fi
  for b in "$@"; do
    got=$(etcd_reported "$dir/bin/$b")
    if [ "$got" != "$version" ]; then
      echo "$dir/bin/$b reports version '${got:-nothing}', not $version" >&2
      return 1
    fi
  done
}
