# Sourced by testbed.sh and realbench.sh: timestamped progress on stderr for their long steps, so a
# cold build (20-30 minutes) never goes silent. stdout stays free for the export lines that
# `eval "$(bash testbed/testbed.sh up)"` reads.
#   tb_log TAG MESSAGE...                 one timestamped line: [12:00:05] [TAG] MESSAGE
#   step_run WHAT LOG FIRST STEP_RE DETAIL_RE -- CMD...
#       runs CMD with its whole output appended to LOG; prints a line on stderr for each output line
#       matching STEP_RE (a Python regular expression) and one at least every 10 s while a step lasts
#       (FIRST names the step before any line matches), with the latest line matching DETAIL_RE
#       ('' for none). Returns CMD's exit code.
#   docker_build_logged WHAT LOG DOCKER-BUILD-ARGS...
#       `docker build --pull=false ARGS` through step_run: a line per Docker step, LOG truncated first. The lines come from cowork_adapter.image.steplines, standard library only, run by the
#       host's python3 from this checkout's src/ (no venv needed).
#   detach LOG CMD...
#       starts CMD in a session of its own, in the background, from /, with stdin, stdout and stderr on
#       LOG (truncated). No process the caller waits on keeps its stdout: a daemon started by `up` must
#       never hold the pipe of `eval "$(bash testbed/testbed.sh up)"` (the rootless start once did, and
#       the substitution waited until CI's time ran out).

STEPS_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../src" && pwd)

detach() {
  local logfile=$1; shift
  (cd / && exec setsid "$@") >"$logfile" 2>&1 </dev/null &
}

tb_log() {
  local tag=$1; shift
  printf '[%s] [%s] %s\n' "$(date -u +%H:%M:%S)" "$tag" "$*" >&2
}

step_run() {
  local what=$1 logfile=$2 first=$3 step_re=$4 detail_re=$5
  shift 5
  [ "${1:-}" = "--" ] && shift
  if ! command -v python3 >/dev/null; then
    # Only `testbed.sh install` on a machine that has no python3 yet (it is among what it installs).
    tb_log steps "$what: running without step lines until python3 is installed (output: $logfile)"
    "$@" >>"$logfile" 2>&1 </dev/null
    return
  fi
  local args=(--what "$what" --log "$logfile" --first "$first" --step "$step_re")
  [ -n "$detail_re" ] && args+=(--detail "$detail_re")
  PYTHONPATH="$STEPS_SRC${PYTHONPATH:+:$PYTHONPATH}" python3 -m cowork_adapter.image.steplines "${args[@]}" -- "$@" </dev/null >&2
}

# A Docker build's steps, from the legacy builder (Step 3/9 : RUN ...) or BuildKit (#7 [2/4] RUN ...),
# and the real-benchmark context's per-server markers (=== NODE /..., === PY /...); any other output
# line is the detail the beats show.
DOCKER_STEP='^Step [0-9]+/[0-9]+ : |^#[0-9]+ \[|=== (NODE|PY) /'

docker_build_logged() {
  local what=$1 logfile=$2
  shift 2
  : >"$logfile"
  step_run "$what" "$logfile" "starting" "$DOCKER_STEP" '\S' -- docker build --pull=false "$@"
}
