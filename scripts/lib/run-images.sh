#!/usr/bin/env bash
# Runs every binary of every image scripts/build-images wrote under runc, a real OCI runtime:
# umoci unpacks the image into a runtime bundle (config.json from the image's config: its user,
# env, working dir), the root filesystem is made read-only, and runc runs the binary with
# --version (etcdctl and etcdutl: `version`). Fails unless each prints the version the image is
# labelled with (the project's binaries: also the git revision) and the operator image runs as
# 65532. Needs root, runc and umoci (scripts/apt-packages).
# Usage: scripts/lib/run-images.sh <images dir> <project version> <git revision>
set -euo pipefail
images=$1 version=$2 revision=$3
say() { echo "run-images: $*" >&2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/run-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# run <layout dir> <tag> <expected text> <argv...>
run() {
  local layout=$1 tag=$2 want=$3 b id out
  shift 3
  b="$work/bundle-$RANDOM"
  umoci unpack --image "$layout:$tag" "$b" >/dev/null
  python3 - "$b/config.json" "$@" <<'PY'
import json, sys
path, argv = sys.argv[1], sys.argv[2:]
c = json.load(open(path))
c["process"]["args"] = argv
c["process"]["terminal"] = False
c["root"]["readonly"] = True
json.dump(c, open(path, "w"))
PY
  id="run-images-$$-$RANDOM"
  if ! out=$(cd "$b" && timeout 60 runc run "$id" 2>&1); then
    say "FAILED: $(basename "$layout") runs $* under runc: $out"
    return 1
  fi
  if [[ $out != *"$want"* ]]; then
    say "FAILED: $(basename "$layout"): $* printed '$out', expected '$want'"
    return 1
  fi
  say "ok: $(basename "$layout"): $* -> $(echo "$out" | head -1)"
  echo "$b"
}

op="$images/etcd-static-operator-$version"
for bin in etcd-operator etcd-installer etcd-verify etcd-recover; do
  b=$(run "$op" "$version" "$bin $version (git ${revision:0:12})" "/usr/local/bin/$bin" --version)
done
uid=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["process"]["user"]["uid"])' "$b/config.json")
if [[ $uid != 65532 ]]; then
  say "FAILED: the operator image runs as uid $uid, not 65532"
  exit 1
fi
# The etcd tools the operator's backup verification runs, one directory per etcd version.
tools=("$b"/rootfs/usr/local/lib/etcd/*/)
if [[ ! -d ${tools[0]} ]]; then
  say "FAILED: the operator image carries no etcd tools (/usr/local/lib/etcd/<version>/)"
  exit 1
fi
run "$op" "$version" "etcd Version:" etcd --version >/dev/null # the --etcd-tools default, on PATH
for t in "${tools[@]}"; do
  v=$(basename "$t")
  run "$op" "$version" "etcd Version: $v" "/usr/local/lib/etcd/$v/etcd" --version >/dev/null
done
for layout in "$images"/etcd-[0-9]*; do
  [[ -d $layout ]] || continue
  v=${layout##*/etcd-}
  run "$layout" "$v" "etcd Version: $v" /usr/local/bin/etcd --version >/dev/null
  run "$layout" "$v" "etcdctl version: $v" /usr/local/bin/etcdctl version >/dev/null
done
for layout in "$images"/kube-*-v[0-9]*; do
  [[ -d $layout ]] || continue
  name=${layout##*/}
  v=${name##*-}
  name=${name%-*}
  run "$layout" "$v" "Kubernetes $v" "/usr/local/bin/$name" --version >/dev/null
done
say "every image runs under runc"
