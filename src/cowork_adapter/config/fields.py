"""The field checks of RunConfig: each flag's value converted to its declared type (msgspec, lax),
then its rule, in declaration order; the sentence refusing the first problem, worded as pydantic (which
described RunConfig before) worded it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from pathlib import Path, PurePath
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import msgspec

from ..defaults import (
    COMMIT_SHA,
    DOCKER_MIN_MEMORY_BYTES,
    PINNED_BENCH_COMMIT,
    UPSTREAM_ENTRY,
    WORD,
    InvalidFlag,
    check_env_name,
    check_http_url,
    flag_name,
)
from ..vocab import REFERENCE_ENGINES, EngineKind

# Numeric rules, one table: field -> (operator, bound). Floats must also be finite.
_NUMERIC_RULES: dict[str, tuple[str, float]] = {
    "concurrency": (">=", 1),
    "trials": (">=", 1),
    "max_steps": (">=", 1),
    "task_timeout": (">", 0),
    "mcp_tool_timeout": (">", 0),
    "review_slots": (">=", 0),
    "max_workers": (">=", 1),
    "subagent_depth": (">=", 0),
    "per_task_cost_usd": (">", 0),
    "llm_gateway_max_tokens": (">=", 1),
    "llm_gateway_unknown_cost_usd": (">", 0),
    "budget_usd": (">", 0),
    "campaign_budget_usd": (">", 0),
    "prior_spend_usd": (">=", 0),
    "budget_reserve_usd": (">=", 0),
    "meter_blindness_sec": (">", 20),  # more than one 15 s poll plus one 5 s read
    "min_free_gib": (">=", 0),
    "min_root_free_gib": (">=", 0),
    "dump_max_gib": (">", 0),
    "dump_max_entries": (">=", 1),
    "dump_max_depth": (">=", 1),
    "min_key_usd": (">=", 0),
    "cpus": (">", 0),
    "pids_limit": (">=", 16),
    "agent_output_cap_mib": (">=", 1),
}
_PATH_FIELDS = (
    "repo_dir",
    "bench_root",
    "resource_root",
    "run_root",
    "task_file",
    "campaign_file",
    "task_validity",
    "provider_standin_bundle",
)


# ---- the field checks -------------------------------------------------------------------------------
# Each field is converted to its declared type (msgspec, lax: "3" for an int, a str for a Path), then
# its rule below, if it has one, runs on the converted value and returns the value kept.

_MISSING_HINTS = {"bench_root": " (or set COWORK_BENCH_ROOT)", "docker_host": " (or set DOCKER_HOST)"}
# Declared optional so the Struct can be built without them; required once derived (_with_derived).
_DERIVED = {"resource_root": Path, "base_image": str}
# How a type mismatch reads, by the type msgspec expected (the words pydantic used).
_EXPECTED = {
    "int": "a valid integer",
    "float": "a valid number",
    "str": "a valid string",
    "bool": "a valid boolean",
    "array": "a valid tuple",
    "Path": "a valid path",
}
# ... and why, by (expected, given).
_WHY = {
    ("int", "str"): ", unable to parse string as an integer",
    ("int", "float"): ", got a number with a fractional part",
    ("float", "str"): ", unable to parse string as a number",
    ("bool", "str"): ", unable to interpret input",
}


def _with_derived(given: Mapping[str, Any]) -> dict[str, Any]:
    """The flags with the defaults that depend on other flags filled in, before any check."""
    data = dict(given)
    if data.get("resource_root") is None and data.get("run_root") is not None:
        data["resource_root"] = Path(data["run_root"]).expanduser().resolve().parent
    if data.get("base_image") is None:
        commit = data.get("bench_commit") or PINNED_BENCH_COMMIT
        data["base_image"] = f"cowork-pack:{str(commit)[:7]}"
    if data.get("probe") == "none":
        data["probe"] = None
    if not data.get("subagents"):
        data["subagent_depth"] = 0  # the depth only means something with subagents on
    return data


def _absolute(name: str, value: Path | None) -> Path | None:
    return None if value is None else value.expanduser().resolve()


def _absolute_ancestors(name: str, value: tuple[Path, ...]) -> tuple[Path, ...]:
    resolved = tuple(p.expanduser().resolve() for p in value)
    if len(set(resolved)) != len(resolved):
        raise InvalidFlag("--resume-from names the same run root twice.")
    return resolved


def _in_range(name: str, value: float | None) -> float | None:
    if value is None:  # unset: --cpus takes the daemon-fitted default, the money bounds the campaign's
        return value
    flag = flag_name(name)
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidFlag(f"{flag} must be a finite number, not {value}.")
    op, bound = _NUMERIC_RULES[name]
    ok = value >= bound if op == ">=" else value > bound
    if not ok:
        words = "at least" if op == ">=" else "greater than"
        raise InvalidFlag(f"{flag} must be {words} {bound:g} (got {value:g}).")
    return value


def _docker_host(name: str, value: str) -> str:
    if not value.strip():
        raise InvalidFlag(
            "--docker-host is empty; name the Docker daemon explicitly (or set DOCKER_HOST).", stage="docker_host"
        )
    return value.strip()


def _commit(name: str, value: str) -> str:
    if COMMIT_SHA.fullmatch(value) is None:
        raise InvalidFlag(f"--bench-commit {value!r} is not a full 40-character lowercase commit id.")
    return value


def _engine(name: str, value: str) -> str:
    if value == EngineKind.OUROBOROS.value or value in REFERENCE_ENGINES:
        return value
    kind, _, entry = value.partition(":")
    if kind != EngineKind.UPSTREAM.value or UPSTREAM_ENTRY.fullmatch(entry) is None:
        raise InvalidFlag(
            f"--engine {value!r} must be 'ouroboros', 'oracle', 'nop' or 'upstream:<entry file under /workspace>'."
        )
    return value


def _model(name: str, value: str) -> str:
    if not value or any(ch.isspace() for ch in value):
        raise InvalidFlag(f"--model {value!r} must be a non-empty model id without spaces.")
    return value


def _word(name: str, value: str) -> str:
    if WORD.fullmatch(value) is None:
        raise InvalidFlag(f"{flag_name(name)} {value!r} must be a single word.")
    return value


def _cycles(name: str, value: str) -> str:
    if not value.isascii() or not value.isdigit():
        raise InvalidFlag(f"--review-max-cycles {value!r} must be a whole number such as 2.")
    return str(int(value))


def _env_name(name: str, value: str) -> str:
    return check_env_name(flag_name(name), value)


def _url(name: str, value: str) -> str:
    """--meter-url always; --openai-compatible-base-url when given (empty means OpenRouter)."""
    return check_http_url(flag_name(name), value) if value or name == "meter_url" else ""


_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?([kmgtp])?(?:i?b)?", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}


def parse_docker_size(text: str) -> int:
    """Bytes of a Docker size string: `16g`, `512m`, `1.5GiB`, `1024` (binary multipliers)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InvalidFlag(f"--memory {text!r} is not a Docker size such as 16g or 512m.")
    unit = match.group(2).lower() if match.group(2) else None
    number = float(match.group(1)) * _SIZE_UNITS[unit]
    if number == float("inf"):  # hundreds of digits: no size, and int() of it would raise OverflowError
        raise InvalidFlag(f"--memory {text[:20]!r}... is too large to be a memory size.")
    value = int(number)
    if value < DOCKER_MIN_MEMORY_BYTES:
        raise InvalidFlag(f"--memory {text!r} is below Docker's minimum of 6 MiB.")
    return value


def _memory(name: str, value: str | None) -> str | None:
    if value is None:
        return value
    parse_docker_size(value)
    return value.strip()


_RULES: dict[str, Callable[[str, Any], Any]] = {
    **dict.fromkeys(_PATH_FIELDS, _absolute),
    "resume_from": _absolute_ancestors,
    **dict.fromkeys(_NUMERIC_RULES, _in_range),
    "docker_host": _docker_host,
    "bench_commit": _commit,
    "engine": _engine,
    "model": _model,
    **dict.fromkeys(("effort", "review_effort", "runtime_mode"), _word),
    "review_max_cycles": _cycles,
    **dict.fromkeys(("api_key_env", "credential_setting"), _env_name),
    **dict.fromkeys(("meter_url", "openai_compatible_base_url", "provider_upstream_url"), _url),
    "memory": _memory,
}


def checked_fields(given: Mapping[str, Any], fields: Sequence[msgspec.structs.FieldInfo]) -> dict[str, Any]:
    """Every flag field of RunConfig (`fields`: its own and its groups', flattened in declaration order)
    converted and checked, in that order, or InvalidFlag with the first problem's sentence: a missing
    required flag, a value of the wrong type, a rule broken; then a name that is no flag. Defaults are
    checked too."""
    data = _with_derived(given)
    checked = {}
    for field in fields:
        value = data.get(field.name, field.default)
        if value is msgspec.NODEFAULT or (field.name in _DERIVED and value is None):
            raise InvalidFlag(f"{flag_name(field.name)} is required{_MISSING_HINTS.get(field.name, '')}.")
        value = _converted(field.name, value, _DERIVED.get(field.name, field.type))
        rule = _RULES.get(field.name)
        if rule is not None:
            try:
                value = rule(field.name, value)
            except InvalidFlag:
                raise
            except ValueError as exc:  # from the standard library (a NUL in a path, a malformed URL)
                raise InvalidFlag(f"{flag_name(field.name)}: value error, {exc}.") from None
        checked[field.name] = value
    unknown = [name for name in data if name not in checked]
    if unknown:
        raise InvalidFlag(f"{flag_name(unknown[0])}: extra inputs are not permitted.")
    return checked


def _as_path(kind: type, value: Any) -> Any:
    if kind is Path and isinstance(value, (str, PurePath)):
        return Path(value)
    raise TypeError(f"Expected `{getattr(kind, '__name__', kind)}`, got `{type(value).__name__}`")


def _converted(name: str, value: Any, kind: Any) -> Any:
    """`value` as the declared type `kind`, or InvalidFlag saying what the flag should be."""
    try:
        return msgspec.convert(value, kind, strict=False, dec_hook=_as_path)
    except msgspec.ValidationError as exc:
        choices = _choices(kind)
        if choices:
            problem = "input should be " + _one_of_words(choices)
        else:
            message = str(exc).split(" - at ")[0]
            expected = re.match(r"Expected `(\w+)[^`]*`, got `(\w+)`", message)  # `str | null`: the first type
            words = _EXPECTED.get(expected.group(1)) if expected else None
            if words and expected:
                problem = f"input should be {words}{_WHY.get((expected.group(1), expected.group(2)), '')}"
            else:
                problem = message[:1].lower() + message[1:]
        raise InvalidFlag(f"{flag_name(name)}: {problem}.") from None


def _choices(kind: Any) -> tuple[str, ...]:
    """The allowed values of a Literal or an Enum field (None aside), else ()."""
    if get_origin(kind) is Literal:
        return tuple(get_args(kind))
    if get_origin(kind) in (Union, UnionType):
        return next((c for c in map(_choices, get_args(kind)) if c), ())
    if isinstance(kind, type) and issubclass(kind, Enum):
        return tuple(str(member.value) for member in kind)
    return ()


def _one_of_words(choices: Sequence[str]) -> str:
    quoted = [f"'{c}'" for c in choices]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
