#!/usr/bin/env bash
# The project's own Docker test bed (see docs/testing.md, "The test bed"): a private dockerd and the images the
# tests need, built without any registry. Usage:
#   testbed/testbed.sh install   # Debian packages the test bed needs, when missing
#   testbed/testbed.sh up        # start both private daemons (idempotent) and build or load the images
#   testbed/testbed.sh env       # print `export DOCKER_HOST=...` for the running daemon
#   testbed/testbed.sh down      # stop both daemons this script started (by their pid files)
#   testbed/testbed.sh rootless up|env|down   # the rootless daemon alone (its user, socket, images)
#   testbed/testbed.sh rootless exec CMD...   # CMD as the rootless daemon's user, DOCKER_HOST set to it
#   testbed/testbed.sh realbench up|env   # the real-benchmark test bed (testbed/realbench.sh)
# State lives in $COWORK_TESTBED_DIR (default /var/lib/cowork-testbed), so images survive between
# runs on one machine; each image carries the content hash of its recipe and is rebuilt only when
# that hash changes. Progress goes to stderr as timestamped lines, at least one every 10 s while a
# step lasts (testbed/steps.sh); stdout carries only the export lines.
set -euo pipefail

TB_DIR=${COWORK_TESTBED_DIR:-/var/lib/cowork-testbed}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=steps.sh
. "$HERE/steps.sh"
SOCK="$TB_DIR/docker.sock"
PIDFILE="$TB_DIR/docker.pid"
export DOCKER_HOST="unix://$SOCK"
# The rootless daemon (docs/install.md: the design's daemon): Debian's dockerd inside RootlessKit, run by
# an unprivileged user the bed creates. Its state lives in a folder that user owns; its socket and pid file
# in its XDG_RUNTIME_DIR there (0700: only that user and root reach them).
RL_USER=${COWORK_ROOTLESS_USER:-cowork-rootless}
RL_DIR="$TB_DIR/rootless"
RL_RUN="$RL_DIR/run"
RL_SOCK="$RL_RUN/docker.sock"
RL_PIDFILE="$RL_RUN/docker.pid"
RL_HOST="unix://$RL_SOCK"

BASE_IMAGE=cowork-testbed/base:bookworm
PG_IMAGE=postgres:15
# One rootfs serves every test image: Python for the benchmark side, PostgreSQL for the stand-in.
BASE_PACKAGES=python3,python3-venv,postgresql-15,postgresql-client-15,procps,git,ca-certificates,util-linux,gzip

log() { tb_log testbed "$@"; }
# debootstrap's phases are lines of their own; its per-package lines only show in the beats.
DEBOOTSTRAP_STEP='^[IW]: (?!(Retrieving|Validating|Extracting|Unpacking|Configuring) [a-z0-9])|^E: '
DEBOOTSTRAP_DETAIL='^I: '

mirror_url() {
  # The Debian mirror apt is already configured with: the only one reachable here.
  local url
  url=$(grep -hoE '^URIs: *http[^ ]+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1 | sed 's/^URIs: *//') || true
  [ -n "$url" ] || url=$(grep -hoE '^deb +http[^ ]+' /etc/apt/sources.list 2>/dev/null | head -n1 | awk '{print $2}') || true
  printf '%s\n' "${url:-http://deb.debian.org/debian}"
}

cmd_install() {
  local need=()
  # The project's own needs first: python3 with venv (scripts/install.sh makes .venv with it; Debian
  # ships ensurepip apart, in python3-venv) and git (the adapter clones the benchmark and the seed).
  command -v python3 >/dev/null || need+=(python3)
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  command -v git >/dev/null || need+=(git)
  command -v dockerd >/dev/null || need+=(docker.io)
  command -v debootstrap >/dev/null || need+=(debootstrap)
  command -v iptables >/dev/null || need+=(iptables)
  command -v rsync >/dev/null || need+=(rsync)
  command -v tmux >/dev/null || need+=(tmux)
  command -v chromium >/dev/null || need+=(chromium)
  command -v ip >/dev/null || need+=(iproute2)  # the daemon-restart test gives its private dockerd a bridge
  # realbench.sh fetches Node and npm for the real benchmark's image with `npm pack`.
  command -v npm >/dev/null || need+=(npm)
  # The rootless daemon: RootlessKit (its namespaces), slirp4netns (its network), newuidmap (its uid ranges).
  command -v rootlesskit >/dev/null || need+=(rootlesskit)
  command -v slirp4netns >/dev/null || need+=(slirp4netns)
  command -v newuidmap >/dev/null || need+=(uidmap)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing: ${need[*]} (log: $TB_DIR/apt.log)"
    mkdir -p "$TB_DIR"; : >"$TB_DIR/apt.log"
    step_run "[testbed] apt-get update" "$TB_DIR/apt.log" "reading the package lists" '^(Get|Hit|Err):' '' \
      -- apt-get update || { tail -n 20 "$TB_DIR/apt.log" >&2; exit 1; }
    # A step per phase (download, then unpack and configure); the package of the moment in the beats.
    step_run "[testbed] apt-get install" "$TB_DIR/apt.log" "resolving" '^(Need to get|Fetched) ' '^(Get:|Unpacking|Setting up)' \
      -- env DEBIAN_FRONTEND=noninteractive apt-get install -y "${need[@]}" || { tail -n 20 "$TB_DIR/apt.log" >&2; exit 1; }
  fi
  # The docker CLI ships with docker.io; a machine may already have a newer client on PATH.
  command -v docker >/dev/null || { log "no docker client after install"; exit 1; }
}

daemon_alive() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

cmd_start_daemon() {
  mkdir -p "$TB_DIR/data" "$TB_DIR/exec"
  if daemon_alive; then log "daemon already running at $SOCK"; return; fi
  if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
    log "pid file names a live process but the socket does not answer"; exit 1
  fi
  rm -f "$PIDFILE" "$SOCK"
  log "starting private dockerd"
  # setsid: the daemon must outlive the shell that started it, and never share its signals.
  detach "$TB_DIR/dockerd.log" dockerd --data-root "$TB_DIR/data" --exec-root "$TB_DIR/exec" -H "unix://$SOCK" \
    --pidfile "$PIDFILE"
  for _ in $(seq 1 60); do daemon_alive && { log "daemon up"; return; }; sleep 1; done
  log "dockerd did not answer within 60 s; last log lines:"; tail -n 20 "$TB_DIR/dockerd.log" >&2; exit 1
}

image_hash() { docker image inspect --format '{{ index .Config.Labels "org.cowork-testbed.hash" }}' "$1" 2>/dev/null || true; }

build_base() {
  local hash
  hash=$(printf '%s\n' "$BASE_PACKAGES" "$(mirror_url)" | sha256sum | cut -c1-16)
  if [ "$(image_hash "$BASE_IMAGE")" = "$hash" ]; then log "$BASE_IMAGE is current ($hash)"; return; fi
  local rootfs="$TB_DIR/rootfs-$hash"
  if [ ! -f "$rootfs/.complete" ]; then
    rm -rf "$rootfs"
    log "debootstrap bookworm ($BASE_PACKAGES; log: $TB_DIR/debootstrap.log)"
    : >"$TB_DIR/debootstrap.log"
    step_run "[testbed] debootstrap" "$TB_DIR/debootstrap.log" "starting" "$DEBOOTSTRAP_STEP" "$DEBOOTSTRAP_DETAIL" \
      -- debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" "$(mirror_url)" \
      || { tail -n 30 "$TB_DIR/debootstrap.log" >&2; exit 1; }
    # The apt lists and caches are dead weight in every container.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs/.complete"
  fi
  log "importing $BASE_IMAGE"
  : >"$TB_DIR/import.log"
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  step_run "[testbed] importing $BASE_IMAGE" "$TB_DIR/import.log" "tar of the rootfs into docker import" '^sha256:' '' \
    -- bash -c 'set -o pipefail; tar -C "$1" --exclude=./.complete -c . | docker import \
         --change "LABEL org.cowork-testbed.hash=$2" \
         --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/15/bin" \
         --change "CMD [\"/bin/bash\"]" - "$3"' import "$rootfs" "$hash" "$BASE_IMAGE" \
    || { tail -n 20 "$TB_DIR/import.log" >&2; exit 1; }
}

build_postgres() {
  local ctx="$HERE/images/postgres" hash
  hash=$( (docker image inspect --format '{{.Id}}' "$BASE_IMAGE"; cat "$ctx"/*) | sha256sum | cut -c1-16)
  if [ "$(image_hash "$PG_IMAGE")" = "$hash" ]; then log "$PG_IMAGE stand-in is current ($hash)"; return; fi
  log "building the $PG_IMAGE stand-in (log: $TB_DIR/postgres-build.log)"
  docker_build_logged "[testbed] building the $PG_IMAGE stand-in" "$TB_DIR/postgres-build.log" --label "org.cowork-testbed.hash=$hash" --build-arg "BASE=$BASE_IMAGE" \
    -t "$PG_IMAGE" "$ctx" || { tail -n 20 "$TB_DIR/postgres-build.log" >&2; exit 1; }
}

# ---- the rootless daemon --------------------------------------------------------------------------------
rl_log() { tb_log rootless "$@"; }
rl_alive() { DOCKER_HOST=$RL_HOST docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
rl_home() { getent passwd "$RL_USER" | cut -d: -f6; }

rl_user() {
  # The daemon's user: an ordinary account with subordinate uid and gid ranges (RootlessKit maps a
  # container's users into them). useradd gives a new account its ranges from login.defs; an account made
  # otherwise gets the next free 65536 of each here.
  if ! id -u "$RL_USER" >/dev/null 2>&1; then
    rl_log "creating the user $RL_USER"
    useradd --create-home --shell /bin/bash --comment "cowork-adapter rootless test bed" "$RL_USER"
  fi
  local kind flag last
  for kind in uid gid; do
    grep -q "^$RL_USER:" "/etc/sub$kind" 2>/dev/null && continue
    last=$(awk -F: 'BEGIN { m = 100000 } { if ($2 + $3 > m) m = $2 + $3 } END { print m }' "/etc/sub$kind" 2>/dev/null \
      || echo 100000)
    flag=--add-sub${kind}s
    rl_log "giving $RL_USER the sub$kind range $last-$((last + 65535))"
    usermod "$flag" "$last-$((last + 65535))" "$RL_USER"
  done
  # The user walks to its folder through the bed's (its socket's path is all it needs there).
  chmod a+x "$TB_DIR"
  mkdir -p "$RL_DIR"
  chown "$RL_USER:" "$RL_DIR"
  chmod 0711 "$RL_DIR"
  runuser -u "$RL_USER" -- mkdir -p "$RL_RUN" "$RL_DIR/data" "$RL_DIR/exec"
  chmod 0700 "$RL_RUN"
}

rl_start() {
  rl_user
  if rl_alive; then rl_log "rootless daemon already running at $RL_SOCK (user $RL_USER)"; return; fi
  if [ -f "$RL_PIDFILE" ] && kill -0 "$(cat "$RL_PIDFILE")" 2>/dev/null; then
    rl_log "pid file $RL_PIDFILE names a live process but the socket does not answer"; exit 1
  fi
  rm -f "$RL_PIDFILE" "$RL_SOCK"
  local script
  script=$(command -v dockerd-rootless.sh || echo /usr/share/docker.io/contrib/dockerd-rootless.sh)
  [ -x "$script" ] || { rl_log "no dockerd-rootless.sh (docker.io ships it in /usr/share/docker.io/contrib)"; exit 1; }
  rl_log "starting the rootless dockerd as $RL_USER"
  # dockerd-rootless.sh re-executes itself inside RootlessKit (user, mount and network namespaces;
  # slirp4netns for the network), then execs dockerd there, so the pid file names dockerd itself (the
  # process `nsenter -t` enters) and stopping it by that pid ends RootlessKit too. A clean environment:
  # nothing of the caller's (root's DOCKER_HOST, a key) reaches the daemon.
  detach "$RL_DIR/dockerd.log" runuser -u "$RL_USER" -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME="$(rl_home)" USER="$RL_USER" XDG_RUNTIME_DIR="$RL_RUN" \
    "$script" --data-root "$RL_DIR/data" --exec-root "$RL_DIR/exec" -H "$RL_HOST" --pidfile "$RL_PIDFILE"
  for _ in $(seq 1 60); do rl_alive && { rl_log "rootless daemon up"; return; }; sleep 1; done
  rl_log "the rootless dockerd did not answer within 60 s; last log lines:"; tail -n 20 "$RL_DIR/dockerd.log" >&2; exit 1
}

rl_images() {
  # The rootful daemon's images, moved over by `docker save | docker load` (no registry): each carries its
  # recipe's hash label, so an image already current there is not moved again.
  local image want have todo=()
  for image in "$BASE_IMAGE" "$PG_IMAGE"; do
    want=$(image_hash "$image")
    have=$(DOCKER_HOST=$RL_HOST image_hash "$image")
    if [ -n "$want" ] && [ "$want" = "$have" ]; then rl_log "$image is current ($have)"; else todo+=("$image"); fi
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  rl_log "loading ${todo[*]} into the rootless daemon (log: $RL_DIR/load.log)"
  : >"$RL_DIR/load.log"
  # shellcheck disable=SC2016  # expanded by the inner bash, from its arguments
  step_run "[rootless] docker save | docker load" "$RL_DIR/load.log" "saving from the rootful daemon" '^Loaded image' '' \
    -- bash -c 'set -o pipefail; docker save "${@:2}" | DOCKER_HOST=$1 docker load' load "$RL_HOST" "${todo[@]}" \
    || { tail -n 20 "$RL_DIR/load.log" >&2; exit 1; }
}

rl_env() {
  echo "export COWORK_ROOTLESS_DOCKER_HOST=$RL_HOST"
  echo "export COWORK_ROOTLESS_USER=$RL_USER"
}

rl_down() {
  if [ ! -f "$RL_PIDFILE" ]; then rl_log "no pid file: no rootless daemon to stop"; return; fi
  local pid; pid=$(cat "$RL_PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { rl_log "rootless dockerd $pid ignored SIGTERM; sending SIGKILL"; kill -9 "$pid"; }
  fi
  rm -f "$RL_PIDFILE"
  rl_log "rootless daemon stopped"
}

rl_exec() {
  # CMD as the daemon's user, in the caller's environment (PYTHONPATH, COWORK_*) but for who it is and where
  # its daemon is. A root-only DOCKER_CONFIG or XDG folder would not be readable by it, so those are its own.
  [ $# -gt 0 ] || { echo "usage: $0 rootless exec CMD..." >&2; exit 2; }
  exec runuser -u "$RL_USER" -- env -u DOCKER_CONFIG HOME="$(rl_home)" USER="$RL_USER" LOGNAME="$RL_USER" XDG_RUNTIME_DIR="$RL_RUN" \
    DOCKER_HOST="$RL_HOST" "$@"
}

cmd_rootless() {
  case "${1:-}" in
    up) rl_start; rl_images; rl_env ;;
    env) rl_alive && rl_env ;;
    down) rl_down ;;
    exec) shift; rl_exec "$@" ;;
    *) echo "usage: $0 rootless up|env|down|exec CMD..." >&2; exit 2 ;;
  esac
}

cmd_up() {
  cmd_start_daemon
  build_base
  build_postgres
  echo "export DOCKER_HOST=$DOCKER_HOST"
  rl_start
  rl_images
  rl_env
}

cmd_down() {
  rl_down
  if [ ! -f "$PIDFILE" ]; then log "no pid file: nothing to stop"; return; fi
  local pid; pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { log "dockerd $pid ignored SIGTERM; sending SIGKILL"; kill -9 "$pid"; }
  fi
  rm -f "$PIDFILE"
  log "daemon stopped"
}

case "${1:-}" in
  install) cmd_install ;;
  up) cmd_up ;;
  env) daemon_alive && echo "export DOCKER_HOST=$DOCKER_HOST" ;;
  down) cmd_down ;;
  rootless) shift; cmd_rootless "$@" ;;
  realbench) shift; exec bash "$HERE/realbench.sh" "$@" ;;
  *) echo "usage: $0 install|up|env|down|rootless up|env|down|exec|realbench up|env" >&2; exit 2 ;;
esac
