"""The task's PostgreSQL between the phases, read and reset from the host (issue 36).

Standard library only (Python 3.10): copied beside the docker shim (custody/bash_env.py) and run
by it, never by the agent. Each task's runner starts `pg-<runner id>`, a postgres container whose
superuser the agent is; nothing the agent ran may still act when the evaluator queries it. What a
caller must know:

- every step is a `docker exec` of the pg container's own binaries (sh, psql: root-owned, so the
  agent, which runs there as the `postgres` user through SQL, cannot replace them), run as that
  user with HOME pointing nowhere (its own home is writable by the agent), `psql -X` (no rc file)
  and PGOPTIONS that outrank any role or database setting the agent left (search_path pinned to
  pg_catalog, no preload libraries, a statement timeout). Every step is bounded in time and in
  output, and a failure is returned as a sentence, never raised.
- `snapshot()` reads the catalog (every code object the server did not ship, digests of the
  built-in rows of the catalogs that define what a query means, role/database/system settings,
  relations and their kinds) and every plain table's row count and order-independent content
  digest, with per-row digests up to ROW_BOUND rows (keyed by the primary key when there is one).
  Rows are read only from tables whose column types print through built-in code: a type the
  agent defined would run its code inside our session.
- `reset()` ends every process the agent started (SIGSTOP in rounds until none is new, then
  SIGKILL: a fork loop cannot outrun it), terminates every other session, restores role- and
  database-level settings to the baseline's, runs ALTER SYSTEM RESET ALL and reloads, then kills
  any process that looks like the server but is not one of its known processes.
The comparison of two snapshots is the host package's (score/taskdb.py), not this file's.
"""

import hashlib
import json
import os
import subprocess
import threading
import time

try:  # inside the package (tests, the host's readers); beside the shim it is a sibling module
    from .taskdb_sql import (
        BUILTIN_DUMP_SQL,
        BUILTIN_SQL,
        OBJECTS_SQL,
        RESTORE_SQL,
        SETTINGS_SQL,
        STRAY_SCRIPT,
        TABLES_SQL,
        count_sql,
        table_sql,
    )
except ImportError:
    from taskdb_sql import (  # type: ignore[no-redef,import-not-found]  # the copy beside the shim
        BUILTIN_DUMP_SQL,
        BUILTIN_SQL,
        OBJECTS_SQL,
        RESTORE_SQL,
        SETTINGS_SQL,
        STRAY_SCRIPT,
        TABLES_SQL,
        count_sql,
        table_sql,
    )

PG_PREFIX = "pg-"
EXEC_TIMEOUT_SEC = 60.0
TABLES_TIMEOUT_SEC = 180.0
OUTPUT_CAP = 16 << 20
TABLE_CAP = 400  # tables read per snapshot; the rest are listed as not read (row bound: taskdb_sql.ROW_BOUND)
STRAY_ROUNDS = 20
READY_TRIES = 60
PGOPTIONS = (
    "-c search_path=pg_catalog,pg_temp -c session_preload_libraries= -c local_preload_libraries= "
    "-c statement_timeout=50000 -c lock_timeout=20000 -c default_transaction_read_only=off "
    "-c idle_in_transaction_session_timeout=0 -c client_min_messages=error -c DateStyle=ISO "
    "-c TimeZone=UTC -c extra_float_digits=1 -c bytea_output=hex -c IntervalStyle=postgres"
)

# ---------------------------------------------------------------- I/O: bounded docker execs


def run_bounded(argv, env, stdin=None, timeout=EXEC_TIMEOUT_SEC, cap=OUTPUT_CAP):
    """(exit code or None, stdout bytes, stderr tail, cause or None). Output past `cap` or a run
    past `timeout` kills the process; never raises."""
    try:
        child = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        return None, b"", "", f"cannot run docker: {type(exc).__name__}"
    out, err, over = [], [], []

    def pump(stream, sink, limit):
        size = 0
        while True:
            chunk = stream.read(65536)
            if not chunk:
                return
            size += len(chunk)
            if size > limit:
                over.append(True)
                child.kill()
                return
            sink.append(chunk)

    readers = [
        threading.Thread(target=pump, args=(child.stdout, out, cap), daemon=True),
        threading.Thread(target=pump, args=(child.stderr, err, 1 << 20), daemon=True),
    ]
    for reader in readers:
        reader.start()
    try:
        if stdin:
            child.stdin.write(stdin)
        child.stdin.close()
    except OSError:
        pass
    cause = None
    try:
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        code = child.wait()
        cause = f"timed out after {timeout:.0f} s"
    for reader in readers:
        reader.join(5)
    if over and cause is None:
        cause = f"output over {cap} bytes"
    tail = b"".join(err)[-400:].decode("utf-8", "replace").strip()
    return code, b"".join(out), tail, cause


class Target:
    """The pg container of one task, reached through the run's real docker."""

    def __init__(self, real_docker, env, container):
        self.docker, self.env, self.container = real_docker, env, container
        self.user, self.db = "postgres", "postgres"

    def identify(self):
        """The superuser and database the runner created the container with (its POSTGRES_*
        variables, set by the runner at creation: the agent cannot change them). Cause or None."""
        code, out, tail, cause = run_bounded(
            [self.docker, "inspect", "--type", "container", "--format", "{{json .Config.Env}}", self.container],
            self.env,
            timeout=30.0,
            cap=1 << 20,
        )
        if cause or code != 0:
            return "absent" if code == 1 and "No such" in tail else ("inspect failed: %s" % (cause or tail[:200]))
        try:
            env = dict(item.split("=", 1) for item in json.loads(out.decode("utf-8")) if "=" in item)
        except (ValueError, TypeError, UnicodeDecodeError):
            return "inspect unreadable"
        self.user = env.get("POSTGRES_USER") or "postgres"
        self.db = env.get("POSTGRES_DB") or self.user
        return None

    def exec_argv(self, extra_env, command):
        argv = [self.docker, "exec", "-i", "-u", "postgres", "-e", "HOME=/nonexistent", "-e", "PSQL_HISTORY=/dev/null"]
        for item in extra_env:
            argv += ["-e", item]
        return argv + [self.container] + command

    def psql(self, script, variables=(), timeout=EXEC_TIMEOUT_SEC):
        """(stdout lines, cause or None) of a psql script read from stdin, stopping at its first error."""
        command = [
            "psql",
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "/var/run/postgresql",
            "-U",
            self.user,
            "-d",
            self.db,
        ]
        for name, value in variables:
            command += ["-v", f"{name}={value}"]
        code, out, tail, cause = run_bounded(
            self.exec_argv(
                ["PGOPTIONS=" + PGOPTIONS, "PGCONNECT_TIMEOUT=10", "PGAPPNAME=cowork-adapter-taskdb"],
                command + ["-f", "-"],
            ),
            self.env,
            stdin=script.encode("utf-8"),
            timeout=timeout,
        )
        if cause or code != 0:
            return [], "psql: %s" % (cause or (f"exit {code}: {tail[:300]}"))
        return out.decode("utf-8", "replace").splitlines(), None

    def strays(self, mode, allowed=()):
        """(lines P pid ppid exe of processes stopped then killed, cause or None)."""
        code, out, tail, cause = run_bounded(
            self.exec_argv(
                [f"ROUNDS={STRAY_ROUNDS}"], ["sh", "-c", STRAY_SCRIPT, "strays", mode] + [str(p) for p in allowed]
            ),
            self.env,
            timeout=EXEC_TIMEOUT_SEC,
            cap=1 << 20,
        )
        lines = out.decode("utf-8", "replace").splitlines()
        killed = [line[2:][:300] for line in lines if line.startswith("P ")][:200]
        if cause or code != 0:
            return killed, "process sweep: %s" % (
                cause or next((x[2:] for x in lines if x.startswith("E ")), f"exit {code}: {tail[:200]}")
            )
        return killed, None

    def wait_ready(self):
        """Whether the server accepts a session again (after a killed server process it restarts its
        sessions): bounded tries of a trivial query, each answer awaited, not slept on."""
        for _ in range(READY_TRIES):
            lines, cause = self.psql("SELECT 1;", timeout=20.0)
            if cause is None and lines[-1:] == ["1"]:
                return True
            time.sleep(0.5)
        return False


# ---------------------------------------------------------------- the two operations


def snapshot(target):
    """The catalog and the tables of the task's database now: a JSON-ready dict; its `error` is a
    sentence when any part could not be read (then the snapshot cannot clear the task)."""
    snap = {
        "taken_at": time.time(),
        "database": target.db,
        "user": target.user,
        "error": None,
        "objects": {},
        "builtin": {},
        "settings": {},
        "db_role": [],
        "tables": {},
    }
    lines, cause = target.psql(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n"
        + OBJECTS_SQL
        + SETTINGS_SQL
        + BUILTIN_DUMP_SQL
        + "\n"
        + TABLES_SQL
        + "COMMIT;\n"
    )
    if cause:
        snap["error"] = cause
        return snap
    try:
        snap["objects"] = json.loads(lines[0]) or {}
        settings = json.loads(lines[1])
        snap["settings"] = settings.get("named") or {}
        snap["db_role"] = settings.get("db_role") or []
        builtin = [line.split("=", 1) for line in lines[2 : 2 + len(BUILTIN_SQL)]]
        snap["builtin"] = {name: hashlib.sha256(value.encode()).hexdigest()[:32] for name, value in builtin}
        tables = json.loads(lines[2 + len(BUILTIN_SQL)])
    except (ValueError, IndexError, AttributeError, TypeError):
        snap["error"] = "catalog answer unreadable"
        return snap
    statements, names = [], []
    for schema, name, columns, printable, key in tables:
        full = schema + "." + name
        entry = {
            "columns": columns,
            "rows": None,
            "digest": None,
            "keyed": bool(key and printable),
            "row_hashes": None,
            "read": "full" if printable else "count_only",
        }
        snap["tables"][full] = entry
        if len(names) >= TABLE_CAP:
            entry["read"] = "not_read"
            continue
        names.append(full)
        statements.append(table_sql(schema, name, key) if printable else count_sql(schema, name))
    if statements:
        lines, cause = target.psql(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;\n" + "\n".join(statements) + "\nCOMMIT;\n",
            timeout=TABLES_TIMEOUT_SEC,
        )
        if cause or len(lines) != len(names):
            snap["error"] = cause or "table answers unreadable"
            return snap
        for full, line in zip(names, lines, strict=False):
            try:
                value = json.loads(line)
            except ValueError:
                snap["error"] = "table answer unreadable"
                return snap
            entry = snap["tables"][full]
            entry["rows"] = value.get("n")
            entry["digest"] = value.get("d")
            entry["row_hashes"] = value.get("rows")
    return snap


def settings_now(target):
    """(the settings part of a snapshot, cause or None): what the agent left, before the reset."""
    lines, cause = target.psql(SETTINGS_SQL)
    if cause:
        return {}, cause
    try:
        value = json.loads(lines[0])
        return value.get("named") or {}, None
    except (ValueError, IndexError, AttributeError):
        return {}, "settings answer unreadable"


def reset(target, baseline_db_role):
    """End what the agent left running and put the settings back; a JSON-ready report whose
    `errors` name every step that did not complete (then the task cannot be cleared)."""
    report = {
        "started_at": time.time(),
        "killed": [],
        "server_killed": [],
        "settings_before": {},
        "sessions_terminated": None,
        "errors": [],
    }
    killed, cause = target.strays("strays")
    report["killed"] = killed
    if cause:
        report["errors"].append(cause)
    # A process the agent left detached was adopted by the postmaster (PID 1): its death by a
    # signal reads to the server as a crashed backend, so it ends every session and restarts
    # them (committed data stays). Wait for that before the next step.
    if killed and not target.wait_ready():
        report["errors"].append("the server did not accept sessions again after the agent's processes were killed")
    report["settings_before"], cause = settings_now(target)
    if cause:
        report["errors"].append("settings before reset: " + cause)
    baseline = json.dumps(baseline_db_role if isinstance(baseline_db_role, list) else [])
    lines, cause = target.psql(RESTORE_SQL, variables=(("baseline", baseline),))
    if cause:
        report["errors"].append("reset: " + cause)
        return _ended(report)
    try:
        report["sessions_terminated"] = int(lines[0])
        allowed = [int(p) for p in (lines[-1].split() if len(lines) > 2 else [])]
    except (ValueError, IndexError):
        report["errors"].append("reset answer unreadable")
        return _ended(report)
    killed, cause = target.strays("strict", allowed)
    report["server_killed"] = killed
    if cause:
        report["errors"].append(cause)
    if killed and not target.wait_ready():
        report["errors"].append("the server did not accept sessions again after its stray processes were killed")
    return _ended(report)


def _ended(report):
    report["ended_at"] = time.time()
    return report


def target_for(config_docker, env, runner_id):
    """(Target, None) for `pg-<runner id>`, or (None, "absent") when the task has no database,
    or (None, cause)."""
    target = Target(config_docker, env, PG_PREFIX + runner_id)
    cause = target.identify()
    return (None, cause) if cause else (target, None)


def dump_json(value):
    return json.dumps(value, sort_keys=True, indent=None, separators=(",", ":")) + "\n"


def baseline_file(runner_id):
    return runner_id + ".taskdb-baseline.json"


def eval_file(runner_id):
    return runner_id + ".taskdb.json"


def marker_ok(path):
    """Whether the agent phase's marker is a regular file (never followed if a link)."""
    try:
        return os.path.isfile(path) and not os.path.islink(path)
    except OSError:
        return False


# ---------------------------------------------------------------- the shim's two moments

# The agent phase (container/agent.py) writes MARKER_NAME in its task dump once preprocess is
# done (its content: after_preprocess, or before_preprocess before an upstream engine that runs
# its own) and waits up to ACK_WAIT_SEC for ACK_NAME; it does so only when the exec carries
# ACK_ENV (this shim sets it), so an agent phase run without the shim never waits.
MARKER_NAME = ".cowork_taskdb_prepared"
ACK_NAME = ".cowork_taskdb_ack"
ACK_ENV = "COWORK_TASKDB_ACK"
ACK_WAIT_SEC = 90.0
POLL_SEC = 0.1
WHEN_VALUES = ("after_preprocess", "before_preprocess")


class BaselineWatch:
    """Watches the task dump for the FIRST marker while the agent exec runs, reads the baseline
    from the host, writes it once (`write(name, text)`), then acknowledges; later markers are the
    agent's and ignored. When the exec ends without one, the record says so (no_marker)."""

    def __init__(self, real_docker, env, runner_id, task, task_root, write):
        self.args = (real_docker, env)
        self.runner_id, self.task, self.task_root, self.write = runner_id, task, task_root, write
        self.done = threading.Event()
        self.taken = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _watch(self):
        marker = os.path.join(self.task_root, MARKER_NAME)
        while not self.done.is_set():
            if marker_ok(marker):
                try:
                    self._take(marker)
                finally:
                    self.taken.set()
                return
            self.done.wait(POLL_SEC)

    def _take(self, marker):
        seen = time.monotonic()
        when = "after_preprocess"
        try:
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                text = os.read(fd, 64).decode("ascii", "replace").strip()
            finally:
                os.close(fd)
            when = text if text in WHEN_VALUES else when
        except OSError:
            pass
        target, cause = target_for(self.args[0], self.args[1], self.runner_id)
        record = {
            "schema": "cowork_adapter.taskdb_baseline.v1",
            "runner_id": self.runner_id,
            "task": self.task,
            "when": when,
            "absent": cause == "absent",
        }
        if target is not None:
            record["snapshot"] = snapshot(target)
        elif cause != "absent":
            record["snapshot"] = {"taken_at": time.time(), "error": cause}
        record["late"] = time.monotonic() - seen > ACK_WAIT_SEC
        self.write(baseline_file(self.runner_id), dump_json(record))
        try:  # the agent phase may go on (no container reads the evidence folder)
            fd = os.open(os.path.join(self.task_root, ACK_NAME), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            os.close(fd)
        except OSError:
            pass

    def finish(self, bound=TABLES_TIMEOUT_SEC + 3 * EXEC_TIMEOUT_SEC):
        """After the exec: wait for a baseline being read (bounded), else record that none came."""
        self.done.set()
        self.thread.join(bound)
        if not self.taken.is_set():
            _, cause = target_for(self.args[0], self.args[1], self.runner_id)
            self.write(
                baseline_file(self.runner_id),
                dump_json(
                    {
                        "schema": "cowork_adapter.taskdb_baseline.v1",
                        "runner_id": self.runner_id,
                        "task": self.task,
                        "when": "no_marker",
                        "absent": cause == "absent",
                    }
                ),
            )


def read_baseline_db_role(path):
    """The baseline's role/database settings rows (the host's own file), or None."""
    try:
        with open(path, "rb") as handle:
            value = json.loads(handle.read(OUTPUT_CAP * 4).decode("utf-8"))
        rows = value["snapshot"]["db_role"]
        return rows if isinstance(rows, list) and not value["snapshot"].get("error") else None
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def unchanged_rows_dropped(after, baseline_path):
    """The eval-time snapshot without the row digests of tables whose columns and content digest
    equal the baseline's (nothing to diff there; the digest and count stay)."""
    try:
        with open(baseline_path, "rb") as handle:
            tables = json.loads(handle.read(OUTPUT_CAP * 4).decode("utf-8"))["snapshot"]["tables"]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
        return after
    for name, entry in (after.get("tables") or {}).items():
        before = tables.get(name) if isinstance(tables, dict) else None
        if (
            isinstance(before, dict)
            and entry.get("digest")
            and before.get("digest") == entry.get("digest")
            and before.get("columns") == entry.get("columns")
            and before.get("rows") == entry.get("rows")
        ):
            entry["row_hashes"] = None
    return after


def eval_check(real_docker, env, runner_id, task, baseline_path, write):
    """At the first eval exec's start: reset what the agent left, read the database again, write
    `<id>.taskdb.json` once. Never raises; a step that failed is named in the record."""
    record = {"schema": "cowork_adapter.taskdb_eval.v1", "runner_id": runner_id, "task": task, "absent": False}
    try:
        target, cause = target_for(real_docker, env, runner_id)
        if cause == "absent":
            record["absent"] = True
        elif target is None:
            record["reset"] = {"started_at": time.time(), "errors": [cause]}
        else:
            db_role = read_baseline_db_role(baseline_path)
            record["reset"] = reset(target, db_role)
            if db_role is None:
                record["reset"]["errors"].append("no readable baseline: role/database settings reset to none")
            record["after"] = unchanged_rows_dropped(snapshot(target), baseline_path)
    except Exception as exc:  # noqa: BLE001 - recorded; the eval exec still runs
        record.setdefault("reset", {"started_at": time.time(), "errors": []})
        record["reset"].setdefault("errors", []).append(f"check failed: {type(exc).__name__}")
    write(eval_file(runner_id), dump_json(record))
    return record
