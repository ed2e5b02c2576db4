#!/usr/bin/env bash
# Demo benchmark runner. It keeps the official Cowork Bench runner's contract so that the adapter
# can be tested against the same shape of runner:
#   bash run_parallel.sh MAX_CONCURRENT [task ...]      (run from the benchmark root)
# Per task: a private network, a PostgreSQL seeded from db/init.sql.gz, an FK-fix helper, an agent
# container (and, with AGENT_PHASE_AWARE=1, a separate eval container), then a summary.csv row
# parsed from the per-task log. No -e: one failing step must not abort the other tasks.
set -uo pipefail

# System directories first, exactly like the official runner: a docker shim must be found by
# `which` (the adapter defines a `which` function through BASH_ENV, so it is called by name here).
export PATH="/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:${PATH}"
DOCKER=$(which docker 2>/dev/null)
[ -n "$DOCKER" ] || DOCKER=/usr/local/bin/docker

if [ $# -lt 1 ]; then
  echo "usage: $0 MAX_CONCURRENT [task ...]" >&2
  exit 2
fi
MAX_CONCURRENT=$1
shift
if [ $# -gt 0 ]; then
  TASKS=("$@")
else
  mapfile -t TASKS < <(ls tasks/finalpool/)
fi
TOTAL=${#TASKS[@]}

MODEL=${MODEL:-${MODEL_NAME:-}}
PROVIDER=${PROVIDER:-${MODEL_PROVIDER:-}}
MAX_STEPS=${MAX_STEPS:-100}
TASK_TIMEOUT=${TASK_TIMEOUT:-1800}
IMAGE=${IMAGE:-cowork-pack:latest}
ENTRY=${ENTRY:-${AGENT_ENTRY:-main.py}}
PHASE_SPLIT=0
[ "${AGENT_PHASE_AWARE:-}" = "1" ] && PHASE_SPLIT=1
# Readiness polling of each task's PostgreSQL (upstream: 150 tries, 2 s apart).
PG_READY_TRIES=${PG_READY_TRIES:-150}
PG_READY_INTERVAL=${PG_READY_INTERVAL:-2}

LOG_DIR="benchmark_logs/fully_parallel_$(date +%Y%m%d_%H%M%S)"
mkdir -p "$LOG_DIR" dumps
SUMMARY="$LOG_DIR/summary.csv"
REGISTRY="$LOG_DIR/.containers"

FORWARDED_VARS=(
  MODEL_API_KEY MODEL_API_URL
  LLM_BASE_URL LLM_API_KEY LLM_MODEL LLM_CONTEXT_WINDOW LLM_STREAM_IDLE_TIMEOUT LLM_SSL_VERIFY
  LLM_PARAM_PROFILE LLM_TEMPERATURE LLM_TOP_P LLM_MAX_TOKENS LLM_OR_PROVIDER LLM_OR_ALLOW_FALLBACKS
  LLM_PRESENCE_PENALTY LLM_REPETITION_PENALTY LLM_REASONING_EFFORT
  MCP_HTTP_URLS MCP_HTTP_TIMEOUT
)

# Recreates the demo schema's foreign key with ON DELETE CASCADE (a real, harmless DDL, the same
# kind of fix-up the official runner applies to its seed). Errors are reported, never fatal.
FK_FIX_PY='
import psycopg2
try:
    conn = psycopg2.connect(connect_timeout=10)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("ALTER TABLE crm.notes DROP CONSTRAINT IF EXISTS notes_customer_id_fkey")
    cur.execute("ALTER TABLE crm.notes ADD CONSTRAINT notes_customer_id_fkey FOREIGN KEY (customer_id) REFERENCES crm.customers(id) ON DELETE CASCADE")
    conn.close()
    print("fk-fix: crm.notes.customer_id -> crm.customers(id) ON DELETE CASCADE")
except Exception as exc:
    print("fk-fix skipped: %s" % exc)
'

now() { date +%H:%M:%S; }

write_run_meta() {
  RM_LOG_DIR="$LOG_DIR" RM_PROVIDER="$PROVIDER" RM_MODEL="$MODEL" RM_CONC="$MAX_CONCURRENT" \
  RM_TOTAL="$TOTAL" RM_STEPS="$MAX_STEPS" RM_TIMEOUT="$TASK_TIMEOUT" RM_IMAGE="$IMAGE" \
  RM_ENTRY="$ENTRY" RM_SPLIT="$PHASE_SPLIT" python3 - <<'PY'
import json, os
from datetime import datetime
e = os.environ
meta = {
    "timestamp": datetime.now().isoformat(timespec="seconds"),
    "log_dir": e["RM_LOG_DIR"],
    "provider": e["RM_PROVIDER"],
    "model": e["RM_MODEL"],
    "model_quant": e.get("MODEL_QUANT", ""),
    "notes": e.get("RUN_NOTES", ""),
    "max_concurrent": int(e["RM_CONC"]),
    "total_tasks": int(e["RM_TOTAL"]),
    "max_steps": int(e["RM_STEPS"]),
    "task_timeout_s": int(e["RM_TIMEOUT"]),
    "image": e["RM_IMAGE"],
    "entry": e["RM_ENTRY"],
    "phase_split": e["RM_SPLIT"] == "1",
    "llm": {
        "base_url": e.get("LLM_BASE_URL", ""),
        "param_profile": e.get("LLM_PARAM_PROFILE", ""),
        "or_provider": e.get("LLM_OR_PROVIDER", ""),
        "temperature": e.get("LLM_TEMPERATURE", ""),
        "top_p": e.get("LLM_TOP_P", ""),
        "reasoning_effort": e.get("LLM_REASONING_EFFORT", ""),
        "context_window": e.get("LLM_CONTEXT_WINDOW", ""),
        "stream_idle_timeout": e.get("LLM_STREAM_IDLE_TIMEOUT", ""),
        "presence_penalty": e.get("LLM_PRESENCE_PENALTY", ""),
        "repetition_penalty": e.get("LLM_REPETITION_PENALTY", ""),
        "ssl_verify": e.get("LLM_SSL_VERIFY", ""),
    },
}
with open(os.path.join(e["RM_LOG_DIR"], "run_meta.json"), "w") as fh:
    json.dump(meta, fh, indent=2)
PY
}

# mkdir is atomic: the simplest lock that bash, macOS and Linux all share.
acquire_lock() { until mkdir "$1" 2>/dev/null; do sleep 0.05; done; }
release_lock() { rmdir "$1" 2>/dev/null; }

register_containers() {
  acquire_lock "$LOG_DIR/.containers.lock"
  printf '%s\n' "$@" >>"$REGISTRY"
  release_lock "$LOG_DIR/.containers.lock"
}

append_summary() {
  local row=$1 counts
  acquire_lock "$LOG_DIR/.summary.lock"
  echo "$row" >>"$SUMMARY"
  counts=$(awk -F, 'NR > 1 { n++
      if ($3 == "True") p++
      else if ($2 == "success") e++
      else if ($2 == "pg_fail") g++
      else a++ }
    END { printf "%d %d %d %d %d", n, p, e, a, g }' "$SUMMARY")
  release_lock "$LOG_DIR/.summary.lock"
  local done_n pass_n eval_n agent_n pg_n
  read -r done_n pass_n eval_n agent_n pg_n <<<"$counts"
  echo "[$(now)] [progress] $done_n/$TOTAL | pass=$pass_n ($((pass_n * 100 / done_n))%) | eval_fail=$eval_n | agent_fail=$agent_n | pg_fail=$pg_n"
}

cleanup_all() {
  # Only the containers this run registered; networks are left to each task's own cleanup.
  if [ -f "$REGISTRY" ]; then
    local name
    while read -r name; do
      [ -n "$name" ] && "$DOCKER" rm -fv "$name" >/dev/null 2>&1
    done <"$REGISTRY"
  fi
  exec 3>&- 2>/dev/null
}

task_hash() {
  if command -v md5 >/dev/null 2>&1; then
    echo "$1" | md5 -q | cut -c1-8
  else
    echo "$1" | md5sum | cut -c1-8
  fi
}

run_one_task() {
  local task=$1
  local start=$SECONDS
  # $$ is the main script's PID even inside the background subshell: it prefixes every name.
  local id="$$-$(task_hash "$task")"
  local pg="pg-$id" agent="agent-$id" evalc="eval-$id" net="net-$id"
  local log="$LOG_DIR/$task.log"
  local staging="" tasks_mount
  echo "[$(now)] START $task"

  "$DOCKER" network create "$net" >>"$log" 2>&1
  register_containers "$pg" "$agent" "$evalc"

  "$DOCKER" run -d --name "$pg" --network "$net" \
    -e POSTGRES_DB=cowork_gym -e POSTGRES_USER=eigent -e POSTGRES_PASSWORD=camel \
    -v "$(pwd)/db/init.sql.gz:/docker-entrypoint-initdb.d/init.sql.gz:ro" \
    --health-cmd "pg_isready -U eigent -d cowork_gym" --health-interval 3s --health-retries 20 \
    postgres:15 >>"$log" 2>&1

  # TCP on purpose: the socket answers during init, before the seed has loaded.
  local ready=0 try
  for ((try = 0; try < PG_READY_TRIES; try++)); do
    if "$DOCKER" exec "$pg" pg_isready -h 127.0.0.1 -p 5432 -U eigent -d cowork_gym >/dev/null 2>&1; then
      ready=1
      break
    fi
    sleep "$PG_READY_INTERVAL"
  done
  if [ "$ready" -ne 1 ]; then
    echo "FAIL $task (postgres not healthy)" >>"$log"
    append_summary "$task,pg_fail,null,$((SECONDS - start))"
    echo "[$(now)] DONE $task -> PG_FAIL ($((SECONDS - start))s)"
    "$DOCKER" rm -fv "$pg" >>"$log" 2>&1
    "$DOCKER" network rm "$net" >>"$log" 2>&1
    return
  fi

  "$DOCKER" run --rm --network "$net" \
    -e PGHOST="$pg" -e PGPORT=5432 -e PGDATABASE=cowork_gym -e PGUSER=eigent -e PGPASSWORD=camel \
    "$IMAGE" /opt/venv/bin/python3 -c "$FK_FIX_PY" >>"$log" 2>&1

  local forwarded=() var
  for var in "${FORWARDED_VARS[@]}"; do
    if [ -n "${!var:-}" ]; then
      forwarded+=(-e "$var=${!var}")
    fi
  done

  if [ "$PHASE_SPLIT" -eq 1 ]; then
    # Only this task, without its answer keys; writable because preprocess writes under it.
    staging=$(mktemp -d "${TMPDIR:-/tmp}/cowork-stage-$id.XXXXXX")
    mkdir -p "$staging/tasks/finalpool"
    rsync -a --exclude groundtruth_workspace --exclude groundtruth_workspace_cn --exclude evaluation \
      "tasks/finalpool/$task" "$staging/tasks/finalpool/" >>"$log" 2>&1
    tasks_mount="$staging/tasks:/workspace/tasks"
  else
    tasks_mount="$(pwd)/tasks:/workspace/tasks:ro"
  fi

  local pg_env=(
    -e PGHOST="$pg" -e PG_HOST="$pg" -e PGPORT=5432 -e PGUSER=eigent -e PGPASSWORD=camel
    -e PGDATABASE=cowork_gym -e LOCAL_SERVERS_PATH=/opt/local_servers
    -e PYTHON_BIN=/opt/venv/bin/python3 -e MODEL_PROVIDER="$PROVIDER" -e MODEL_NAME="$MODEL"
  )
  "$DOCKER" run -d --name "$agent" --network "$net" "${pg_env[@]}" "${forwarded[@]}" \
    -v "$(pwd)/dumps:/workspace/dumps" -v "$(pwd)/configs:/workspace/configs:ro" -v "$tasks_mount" \
    -w /workspace "$IMAGE" sleep 7200 >>"$log" 2>&1
  sleep 1

  local phase_args=()
  [ "$PHASE_SPLIT" -eq 1 ] && phase_args=(--phase agent)
  "$DOCKER" exec "$agent" timeout -k 30 "$TASK_TIMEOUT" /opt/venv/bin/python3 -u "/workspace/$ENTRY" \
    --task_dir "$task" --max_steps "$MAX_STEPS" "${phase_args[@]}" >>"$log" 2>&1

  if [ "$PHASE_SPLIT" -eq 1 ]; then
    "$DOCKER" rm -fv "$agent" >>"$log" 2>&1
    # The eval container sees the full tree (answer keys included) but no model credentials.
    "$DOCKER" run -d --name "$evalc" --network "$net" "${pg_env[@]}" \
      -v "$(pwd)/dumps:/workspace/dumps" -v "$(pwd)/tasks:/workspace/tasks:ro" \
      -v "$(pwd)/configs:/workspace/configs:ro" \
      -w /workspace "$IMAGE" sleep 1800 >>"$log" 2>&1
    sleep 1
    "$DOCKER" exec "$evalc" /opt/venv/bin/python3 -u "/workspace/$ENTRY" --task_dir "$task" --phase eval \
      >>"$log" 2>&1
  fi

  local status eval_pass=null label
  if grep -q 'Status: success' "$log"; then
    status=success
  elif grep -q 'Status: failed' "$log"; then
    status=failed
  else
    status=unknown
  fi
  if [ "$status" = success ]; then
    if grep -q 'Pass:.*True' "$log"; then
      eval_pass=True
    elif grep -q 'Pass:.*False' "$log"; then
      eval_pass=False
    fi
  fi
  if [ "$eval_pass" = True ]; then
    label=PASS
  elif [ "$status" = success ]; then
    label=EVAL_FAIL
  else
    label=AGENT_FAIL
  fi
  local duration=$((SECONDS - start))
  append_summary "$task,$status,$eval_pass,$duration"
  echo "[$(now)] DONE $task -> $label (${duration}s)"

  "$DOCKER" rm -fv "$agent" >>"$log" 2>&1
  "$DOCKER" rm -fv "$evalc" >>"$log" 2>&1
  "$DOCKER" rm -fv "$pg" >>"$log" 2>&1
  "$DOCKER" network rm "$net" >>"$log" 2>&1
  [ -n "$staging" ] && rm -rf "$staging"
}

final_report() {
  FR_SUMMARY="$SUMMARY" FR_LOG_DIR="$LOG_DIR" FR_MODEL="$MODEL" FR_CONC="$MAX_CONCURRENT" \
  FR_IMAGE="$IMAGE" python3 - <<'PY'
import csv, os
from datetime import datetime
e = os.environ
with open(e["FR_SUMMARY"], newline="") as fh:
    rows = list(csv.DictReader(fh))
counts = {"PASS": 0, "EVAL_FAIL": 0, "PG_FAIL": 0, "AGENT_FAIL": 0}
print("\n=== Results ===")
for row in sorted(rows, key=lambda r: r["task"]):
    if row["eval_pass"] == "True":
        label = "PASS"
    elif row["status"] == "success":
        label = "EVAL_FAIL"
    elif row["status"] == "pg_fail":
        label = "PG_FAIL"
    else:
        label = "AGENT_FAIL"
    counts[label] += 1
    print(f"  {label:<10} {row['task']} ({row['duration_s']}s)")
total = len(rows)
pct = round(100.0 * counts["PASS"] / total, 1) if total else 0.0
print(f"Total: {total} | pass={counts['PASS']} ({pct}%) | eval_fail={counts['EVAL_FAIL']} "
      f"| agent_fail={counts['AGENT_FAIL']} | pg_fail={counts['PG_FAIL']}")
index = "benchmark_logs/index.csv"
columns = ["timestamp", "model", "model_quant", "reasoning_effort", "max_concurrent", "total", "pass",
           "pass_pct", "eval_fail", "agent_fail", "other", "idle_timeout", "context_window", "image",
           "notes", "log_dir"]
new = not os.path.exists(index)
with open(index, "a", newline="") as fh:
    writer = csv.writer(fh)
    if new:
        writer.writerow(columns)
    writer.writerow([datetime.now().isoformat(timespec="seconds"), e["FR_MODEL"], e.get("MODEL_QUANT", ""),
                     e.get("LLM_REASONING_EFFORT", ""), e["FR_CONC"], total, counts["PASS"], pct,
                     counts["EVAL_FAIL"], counts["AGENT_FAIL"], counts["PG_FAIL"],
                     e.get("LLM_STREAM_IDLE_TIMEOUT", ""), e.get("LLM_CONTEXT_WINDOW", ""), e["FR_IMAGE"],
                     e.get("RUN_NOTES", ""), e["FR_LOG_DIR"]])
PY
}

write_run_meta
echo "=== demo bench: $TOTAL tasks, concurrency $MAX_CONCURRENT, image $IMAGE, entry $ENTRY, split $PHASE_SPLIT ==="
echo "=== logs: $LOG_DIR ==="

if ! "$DOCKER" run --rm "$IMAGE" true >/dev/null 2>&1; then
  echo "ERROR: image $IMAGE cannot run (docker run --rm $IMAGE true failed)" >&2
  exit 1
fi

# A FIFO semaphore: one token per free slot; a finished task gives its token back.
mkfifo "$LOG_DIR/.semaphore"
exec 3<>"$LOG_DIR/.semaphore"
rm -f "$LOG_DIR/.semaphore"
for ((slot = 0; slot < MAX_CONCURRENT; slot++)); do echo >&3; done

echo "task,status,eval_pass,duration_s" >"$SUMMARY"
: >"$REGISTRY"
trap cleanup_all EXIT

PIDS=()
for task in "${TASKS[@]}"; do
  read -r -u 3 _token
  (
    run_one_task "$task"
    echo >&3
  ) &
  PIDS+=($!)
done
FAILED=0
for pid in "${PIDS[@]}"; do
  wait "$pid" || FAILED=$((FAILED + 1))
done

final_report
