"""The agent phase: workspace, preprocess, MCP proxy, engine, and the summary on every path.

The provider key is read from the env var the config names and deleted from os.environ before
any child starts; only the Ouroboros server receives it, through settings.json (0600).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

from . import bench, mcp, ouroboros, protocol, reference, taskdb_marker, upstream
from .outcome import ERROR_MAX, apply_result, classify, final_answer, model_activity, new_summary
from .procs import end_strays, stop_group
from .runconfig import DEFAULT_KEY_ENV, EntrypointConfig, ImagePaths, env_seconds, load_run_config, run_config_path
from .vocab import AdapterReason, AdapterStage, BenchStatus, EngineKind

SUMMARY_NAME = "ouroboros_summary.json"
SERVER_LOG = "ouroboros_server.log"
DEADLINE_MARGIN_SEC = 10.0  # stop polling a little before the runner's SIGTERM to save evidence
START_WAIT_SEC = 300.0
PREPROCESS_MAX_SEC = 900.0
SECRET_NAME_HINTS = ("_API_KEY", "_TOKEN", "PASSWORD", "SECRET")


class WallClockInterrupt(BaseException):
    """SIGTERM from the runner's `timeout`, or the outer deadline: never swallowed by retries."""


def _on_sigterm(signum, frame):
    raise WallClockInterrupt("SIGTERM received")


def _iso_now() -> str:
    return protocol.now_iso()


class AgentRun:
    """One agent phase. `run()` always writes the summary and returns 0."""

    def __init__(self, task_dir: str, max_steps: int, unknown_flags: list, out=None):
        self.started = time.monotonic()
        self.start_time = _iso_now()
        self.task_dir = task_dir
        self.max_steps = max_steps
        self.out = out or sys.stdout
        self.paths = ImagePaths.from_env(os.environ)
        self.summary = new_summary(engine="ouroboros", model=None, task=task_dir, max_steps=max_steps)
        self.summary["unknown_flags"] = list(unknown_flags)
        self.terms: list[str] = []
        self.cfg: EntrypointConfig | None = None
        self.task_config: Any = None
        self.task_root: str | None = None
        self.proxy = None
        self.server = None
        self.task_id: str | None = None
        self.result: dict | None = None
        self.deadline = float("inf")
        self.upstream_exit: int | None = None
        self.upstream_mode = False
        self.reference_mode = False  # oracle / nop: no model, no server, nothing to checkpoint
        self.key: str | None = None
        self.config_error = ""
        self.workspace = ""
        self.workspace_git = False  # True when this run made the workspace a git repository

    # ------------------------------------------------------------ entry

    def run(self) -> int:
        signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            try:
                self._steps()
            finally:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except WallClockInterrupt as exc:
            self._fail(
                AdapterReason.WALL_CLOCK_TIMEOUT.value,
                str(exc),
                truncated=True,
                infra=not self.summary["task_submission_started"],
            )
        except TimeoutError as exc:
            self._fail(
                AdapterReason.WALL_CLOCK_TIMEOUT.value,
                str(exc),
                truncated=True,
                infra=not self.summary["task_submission_started"],
            )
        except ouroboros.EngineFailure as exc:
            self._fail(exc.reason, str(exc))
        except Exception as exc:  # anything unplanned still ends with a summary
            tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            self._fail(AdapterReason.ADAPTER_CRASHED.value, tail)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self._finish()
        return 0

    def _fail(self, reason: str, error: str, *, truncated: bool = False, infra: bool = True) -> None:
        self.summary.update(
            bench_status=BenchStatus.FAILED.value,
            reason_code=reason,
            error=error,
            truncated=truncated,
            infra_failed=infra,
        )

    def _stage(self, stage: AdapterStage) -> None:
        self.summary["adapter_stage"] = stage.value

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _start_deadline(self) -> float:
        return min(time.monotonic() + env_seconds(os.environ, "COWORK_START_WAIT_SEC", START_WAIT_SEC), self.deadline)

    def _check_wait(self, outcome: str, reason: str, what: str) -> None:
        if not outcome:
            return
        if outcome == "timeout" and self._left() <= 0:
            raise WallClockInterrupt(f"outer deadline reached while waiting for {what}")
        raise ouroboros.EngineFailure(reason, f"{what} {'exited' if outcome == 'exited' else 'not ready in time'}")

    # ------------------------------------------------------------ steps

    def _steps(self) -> None:
        self._load_config()
        self._open_task()
        cfg = self.cfg
        assert cfg is not None
        if cfg.upstream_entry:
            self._run_upstream(cfg)
            return
        if cfg.reference_engine:
            self._run_reference(cfg)
            return
        if not self.key:
            raise ouroboros.EngineFailure(
                AdapterReason.CONFIG_INVALID.value, f"provider key env {cfg.key_env} is empty in the agent container"
            )
        self._stage(AdapterStage.WORKSPACE)
        workspace = bench.prepare_workspace(self.task_config)
        self.workspace = workspace
        self._stage(AdapterStage.PREPROCESS)
        self._preprocess(workspace)
        self._db_prepared("after_preprocess")
        self._stage(AdapterStage.MCP)
        names = list(bench.attr(self.task_config, "needed_mcp_servers", default=[]) or [])
        self.summary["mcp_servers"] = names
        self._start_mcp(cfg, names, workspace)
        self._stage(AdapterStage.SERVER)
        self._start_server(cfg, names)
        self._stage(AdapterStage.TASK)
        self._run_task(cfg, workspace)
        self._stage(AdapterStage.FINISHED)

    def _load_config(self) -> None:
        path = run_config_path(os.environ)
        cfg, raw, error = load_run_config(path)
        # The key leaves os.environ before anything else can start a child process.
        keys = [os.environ.pop(DEFAULT_KEY_ENV, None)]
        if cfg and cfg.key_env != DEFAULT_KEY_ENV:
            keys.append(os.environ.pop(cfg.key_env, None))
        self.key = next((k for k in keys if k), None)
        secrets = [k for k in keys if k]
        raw_settings = found if isinstance(raw, dict) and isinstance(found := raw.get("settings"), dict) else {}
        secrets += [v for k, v in raw_settings.items() if any(h in str(k).upper() for h in SECRET_NAME_HINTS)]
        self.terms = protocol.secret_terms(secrets)
        self.cfg = cfg
        self.config_error = error
        raw_model = raw.get("model") if isinstance(raw, dict) else None
        self.summary["model"] = cfg.model if cfg else (raw_model if isinstance(raw_model, str) else None)
        if cfg:
            self.summary["engine"] = cfg.engine
            self.deadline = self.started + cfg.task_timeout_sec - DEADLINE_MARGIN_SEC

    def _short_name(self) -> str:
        if self.cfg:
            return self.cfg.agent_short_name
        model = self.summary["model"] or os.environ.get("LLM_MODEL") or os.environ.get("MODEL_NAME") or "unknown"
        return f"ouroboros/{model}"

    def _open_task(self) -> None:
        short = self._short_name()
        self.task_root = bench.expected_task_root(self.task_dir, short)
        build_error = ""
        try:
            self.task_config = bench.build_task_config(self.task_dir, short)
            self.task_root = os.path.abspath(bench.attr(self.task_config, "task_root"))
        except Exception as exc:  # recorded; config problems take precedence below
            build_error = f"TaskConfig.build failed: {type(exc).__name__}: {exc}"
        os.makedirs(self.task_root, exist_ok=True)
        if self.cfg is None:
            raise ouroboros.EngineFailure(AdapterReason.CONFIG_INVALID.value, self.config_error)
        env_model = os.environ.get("LLM_MODEL") or os.environ.get("MODEL_NAME")
        if env_model and env_model != self.cfg.model:
            raise ouroboros.EngineFailure(
                AdapterReason.MODEL_MISMATCH.value, f"env model {env_model} differs from config model {self.cfg.model}"
            )
        if build_error:
            raise RuntimeError(build_error)

    def _dump(self, name: str) -> str:
        assert self.task_root
        return os.path.join(self.task_root, name)

    def _preprocess(self, workspace: str) -> None:
        command = bench.preprocess_command(self.task_config, workspace)
        if not command:
            return
        timeout = min(PREPROCESS_MAX_SEC, max(1.0, self._left()))
        code, why = bench.run_preprocess(
            command, log_path=self._dump("preprocess.log"), env=dict(os.environ), timeout=timeout
        )
        if code != 0:
            raise ouroboros.EngineFailure(
                AdapterReason.PREPROCESS_FAILED.value, f"preprocess {'timed out' if why else f'exited {code}'}"
            )

    def _db_prepared(self, when: str) -> None:
        """The host reads the task database now, before any of the agent's code runs (issue 36)."""
        assert self.task_root
        taskdb_marker.prepared(self.task_root, when, os.environ)  # late or absent: the host records it

    def _start_mcp(self, cfg: EntrypointConfig, names: list, workspace: str) -> None:
        if not names:
            return  # nothing to serve: no proxy
        subst = {
            "local_servers_paths": os.environ.get("LOCAL_SERVERS_PATH") or os.path.abspath("./local_servers"),
            "agent_workspace": workspace,
            "task_dir": bench.task_path(self.task_dir),
        }
        try:
            servers = mcp.render_servers(
                names,
                os.path.abspath(os.path.join("configs", "mcp_servers")),
                subst=subst,
                env=os.environ,
                workspace=workspace,
                is_root=os.geteuid() == 0,
            )
        except mcp.McpConfigError as exc:
            reason = AdapterReason.MCP_CONFIG_MISSING if exc.kind == "missing" else AdapterReason.MCP_CONFIG_INVALID
            raise ouroboros.EngineFailure(reason.value, str(exc)) from None
        config_path = os.path.join(self.paths.runtime_dir, "mcp_proxy.json")
        mcp.write_proxy_config(config_path, servers)
        self.proxy = mcp.start_proxy(
            self.paths.mcp_proxy,
            config_path=config_path,
            port=cfg.proxy_port,
            cwd=workspace,
            env=os.environ,
            log_path=self._dump("mcp_proxy.log"),
        )
        self._check_wait(
            mcp.wait_proxy(self.proxy, cfg.proxy_port, self._start_deadline()),
            AdapterReason.MCP_START_FAILED.value,
            "mcp-proxy",
        )

    def _start_server(self, cfg: EntrypointConfig, names: list) -> None:
        settings = ouroboros.build_settings(
            base=cfg.settings,
            mcp_names=names,
            proxy_port=cfg.proxy_port,
            mcp_tool_timeout_sec=cfg.mcp_tool_timeout_sec,
            max_steps=self.max_steps,
            credential_setting=cfg.credential_setting,
            key=self.key or "",
            base_url=cfg.openai_compatible_base_url,
        )
        os.makedirs(self.paths.runtime_dir, exist_ok=True)
        ouroboros.prepare_data_root(self.paths.data_dir, settings)
        self._write_json(
            "applied_settings.json", ouroboros.applied_settings(settings, cfg.credential_setting, self.terms)
        )
        env = ouroboros.server_env(os.environ, paths=self.paths, port=cfg.server_port)
        # The server holds the key: its raw log stays in the runtime dir; the dump gets scrubbed copies.
        self.server = ouroboros.start_server(
            self.paths, port=cfg.server_port, env=env, log_path=os.path.join(self.paths.runtime_dir, SERVER_LOG)
        )
        self._check_wait(
            ouroboros.wait_server(self.server, cfg.server_port, self._start_deadline()),
            AdapterReason.SERVER_START_FAILED.value,
            "Ouroboros server",
        )

    def _run_task(self, cfg: EntrypointConfig, workspace: str) -> None:
        overhead = time.monotonic() - self.started
        timeout = ouroboros.agent_timeout(cfg.task_timeout_sec, overhead)
        self.summary.update(adapter_overhead_sec=round(overhead, 3), ouroboros_timeout_sec=timeout)
        body = ouroboros.task_body(
            system_prompt=bench.attr(self.task_config, "system_prompts", "agent", default=""),
            task_text=bench.attr(self.task_config, "task_str", default=""),
            workspace=workspace,
            disabled_tools=cfg.disabled_tools,
            timeout_sec=timeout,
        )
        try:
            self.workspace_git = ouroboros.ensure_worktree_root(workspace)
        except (OSError, subprocess.SubprocessError) as exc:  # the server's refusal will then say why
            self._note(f"could not make the workspace a git repository: {type(exc).__name__}")
        self.summary["task_submission_started"] = True
        self.task_id = ouroboros.submit(cfg.server_port, body)
        self.summary["ouroboros_task_id"] = self.task_id

        def on_result(result: dict) -> None:
            self.result = result
            apply_result(self.summary, result)

        result, exhausted = ouroboros.poll(
            cfg.server_port,
            self.task_id,
            proc=self.server,
            deadline=self.deadline,
            on_tick=self._checkpoint,
            on_result=on_result,
            cost_grace_sec=env_seconds(os.environ, "COWORK_COST_GRACE_SEC", 60.0),
            interval=env_seconds(os.environ, "COWORK_POLL_SEC", 2.0),
        )
        self.summary["cost_finality_wait_exhausted"] = exhausted
        self.summary.update(classify(result, cfg.truncation_reason_codes))

    def _run_reference(self, cfg: EntrypointConfig) -> None:
        """oracle / nop: the task's own workspace and preprocess, then no model at all.

        oracle writes the task's ground truth over the workspace (as an agent's files would be);
        nop leaves the workspace as preprocess left it. Either ends as a successful agent, so the
        official evaluator grades the dump exactly as it grades any agent's.
        """
        self.reference_mode = True
        self._stage(AdapterStage.WORKSPACE)
        workspace = bench.prepare_workspace(self.task_config)
        self.workspace = workspace
        self._stage(AdapterStage.PREPROCESS)
        self._preprocess(workspace)
        self._db_prepared("after_preprocess")
        self._stage(AdapterStage.TASK)
        if cfg.engine == EngineKind.ORACLE.value:
            source = reference.staged_groundtruth(cfg.path, self.task_dir)
            self.summary["oracle_groundtruth"] = reference.place_groundtruth(source, workspace)
        self.summary.update(
            bench_status=BenchStatus.SUCCESS.value, infra_failed=False, reason_code=None, truncated=False, error=None
        )
        self._stage(AdapterStage.FINISHED)

    def _run_upstream(self, cfg: EntrypointConfig) -> None:
        self.upstream_mode = True
        self._stage(AdapterStage.TASK)
        self.summary["task_submission_started"] = True
        entry = cfg.upstream_entry or ""
        self._db_prepared("before_preprocess")  # the upstream engine runs its own preprocess
        phase_flag = upstream.accepts_phase(os.path.join(os.getcwd(), entry))
        self.summary["upstream_phase_flag"] = phase_flag
        code = upstream.run_child(
            self.paths.bench_python,
            entry,
            task_dir=self.task_dir,
            max_steps=self.max_steps,
            key=self.key,
            terms=self.terms,
            out=self.out,
            deadline=self.deadline,
            phase_flag=phase_flag,
        )
        self.upstream_exit = code
        assert self.task_root
        if not phase_flag:  # it graded itself without groundtruth: keep that aside, not official
            self.summary["upstream_agent_verdict_set_aside"] = upstream.set_aside_agent_verdict(self.task_root)
        status = protocol.read_log_status(self._dump(protocol.LOG_NAME))
        ok = status in {s.value for s in BenchStatus}
        error = None
        if not ok:
            elsewhere = bench.dumps_of_task(self.task_dir, exclude=self.task_root)
            error = "upstream engine wrote no readable traj_log.json status" + (
                f" in {self.task_root}; it wrote one in {', '.join(elsewhere)}" if elsewhere else ""
            )
        self.summary.update(
            bench_status=status if ok else BenchStatus.FAILED.value,
            infra_failed=not ok,
            reason_code=None if ok else f"upstream_exit_{code}",
            model_activity_observed=None,
            error=error,
        )
        self._stage(AdapterStage.FINISHED)

    # ------------------------------------------------------------ evidence

    def _checkpoint(self) -> None:
        try:
            ouroboros.checkpoint(self.paths.data_dir, self.task_id, self._dump("ouroboros"), self.terms)
            raw_log = os.path.join(self.paths.runtime_dir, SERVER_LOG)
            if self.server is not None and os.path.exists(raw_log):
                with open(raw_log, "rb") as fh:
                    data = protocol.scrub_bytes(fh.read(), self.terms)
                protocol.write_atomic(self._dump(SERVER_LOG), data)
        except OSError as exc:
            self._note(f"checkpoint failed: {type(exc).__name__}")

    def _note(self, text: str) -> None:
        print(protocol.runner_safe(protocol.scrub(f"[cowork] {text}", self.terms)), file=sys.stderr, flush=True)

    def _write_json(self, name: str, obj: Any) -> None:
        text = protocol.scrub(json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True, default=str), self.terms)
        try:
            protocol.write_atomic(self._dump(name), (text + "\n").encode("utf-8"))
        except OSError as exc:
            self._note(f"could not write {name}: {type(exc).__name__}")

    def _finish(self) -> None:
        s = self.summary
        s["elapsed_sec"] = round(time.monotonic() - self.started, 3)
        if s["error"]:
            s["error"] = protocol.scrub(str(s["error"]), self.terms)[:ERROR_MAX]
        if self.reference_mode:
            s["model_activity_observed"] = False  # no model exists in this phase
        elif not self.upstream_mode:
            s["model_activity_observed"] = model_activity(s["task_submission_started"], self.result)
            # One record per model request, from the server's attempt ledger: its prompt_tokens
            # above are the task loop's own and leave out side calls (e.g. post-task synthesis).
            s["attempt_ledger_usage"] = ouroboros.attempt_usage(self.paths.data_dir)
        end_time = _iso_now()
        try:
            if self.task_root:
                if not self.upstream_mode:
                    if not self.reference_mode:
                        self._checkpoint()
                    if self.task_config is not None:
                        self._write_json(
                            protocol.LOG_NAME,
                            {
                                "config": self._config_dict(),
                                "status": s["bench_status"],
                                "start_time": self.start_time,
                                "end_time": end_time,
                            },
                        )
                    self._write_json("traj.json", self._traj(end_time))
                self._write_json(SUMMARY_NAME, s)
        finally:
            for proc in (self.server, self.proxy):
                try:
                    stop_group(proc)
                except Exception as exc:  # a stuck group must not hide the summary line
                    self._note(f"stop failed: {type(exc).__name__}")
            if self.task_root and not self.upstream_mode and not self.reference_mode:
                self._checkpoint()  # the server's last log lines, written while it stopped
            if self.workspace_git:
                ouroboros.remove_worktree_git(self.workspace)
        strays = end_strays()
        if strays and self.task_root:  # a leftover could have rewritten the summary: ours is the last word
            s["strays_killed"] = strays
            self._write_json(SUMMARY_NAME, s)
        line = json.dumps(s, ensure_ascii=False, sort_keys=True, default=str)
        print(protocol.runner_safe(protocol.scrub(f"[cowork] summary: {line}", self.terms)), file=self.out, flush=True)
        if not self.upstream_mode:
            print(f"====== Status: {s['bench_status']} ======", file=self.out, flush=True)

    def _config_dict(self) -> Any:
        to_dict = getattr(self.task_config, "to_dict", None)
        return to_dict() if callable(to_dict) else self.task_config

    def _traj(self, end_time: str) -> dict:
        folder = self._dump("ouroboros")
        files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        answer = final_answer(self.result)
        return {
            "status": self.summary["bench_status"],
            "start_time": self.start_time,
            "end_time": end_time,
            "engine": self.summary["engine"],
            "final_answer": protocol.scrub(answer, self.terms) if answer else answer,
            "summary": self.summary,
            "trajectory": {"log_dir": "ouroboros", "files": [f for f in files if not f.startswith(".")]},
        }


def run_agent(task_dir: str, max_steps: int, unknown_flags: list, out=None) -> int:
    return AgentRun(task_dir, max_steps, unknown_flags, out=out).run()
