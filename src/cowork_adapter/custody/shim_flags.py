"""The flags the shim inserts into an admitted container creation: the run and role labels, the limits,
`--pull=never`, the log bound and capabilities (container_caps.py), the agent's env file or per-task
gateway token, the default route's host and CA bundle, the eval container's pinned evaluator code.
Standard library only.
"""

import hashlib
import hmac
import os
import time

try:  # inside the package (tests, the host's readers); beside the installed shim, its siblings are top-level
    from .shim_io import evidence_path, load_sibling
    from .shim_words import AGENT_REMOVED_SUFFIX, ROLE_LABEL_KEY, RUN_LABEL_KEY
except ImportError:
    from shim_io import evidence_path, load_sibling  # type: ignore[no-redef,import-not-found]
    from shim_words import (  # type: ignore[no-redef,import-not-found]
        AGENT_REMOVED_SUFFIX,
        ROLE_LABEL_KEY,
        RUN_LABEL_KEY,
    )


# The gateway token (see cowork_adapter.gateway.server: same prefix, context and message layout).
TOKEN_PREFIX = "cwg1"
TOKEN_CONTEXT = b"cowork-gateway-token\0"
KEY_ENV_IN_AGENT = "COWORK_PROVIDER_KEY"
# gateway/tls.py BUNDLE_IN_CONTAINER and CA_ENV_NAMES (this file cannot import the package).
PROVIDER_BUNDLE_TARGET = "/etc/cowork-adapter/provider-ca-bundle.pem"
PROVIDER_CA_ENV = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")


def creation_flags(config, role, name):
    """The flags the shim inserts into a container creation."""
    limits = config["limits"]
    flags = [
        "--label",
        RUN_LABEL_KEY + "=" + config["run_label"],
        "--label",
        ROLE_LABEL_KEY + "=" + role,
        "--cpus",
        format_cpus(limits["cpus"]),
        "--memory",
        str(int(limits["memory_bytes"])),
        "--memory-swap",
        str(int(limits["memory_swap_bytes"])),
        "--pids-limit",
        str(int(limits["pids_limit"])),
        "--pull=never",
    ]
    flags += hardening_flags(config, role)
    agent = role == "agent" and bool(name) and name.startswith("agent-")
    if config.get("agent_env_file") and agent:
        flags += ["--env-file", config["agent_env_file"]]
    if config.get("provider_address") and agent:
        flags += provider_flags(config)
    if role == "eval" and bool(name) and name.startswith("eval-"):
        for volume in config.get("eval_mounts") or []:  # the pinned evaluator code, read-only
            flags += ["--volume", volume]
    return flags


def hardening_flags(config, role):
    """Issue 37: a bounded log for every container, and the capabilities its role does not need
    dropped (container_caps.py); nothing for a config from before these bounds."""
    caps = load_sibling("container_caps")
    if caps is None:
        return []
    return caps.log_flags(config) + caps.cap_flags(config, role)


def provider_flags(config):
    """The provider's host resolves to the gateway, whose certificate the run CA signed: trusted here."""
    source = "source=" + config["provider_ca_bundle"]
    if "," in source or '"' in source:  # --mount is one CSV record: a field holding a comma is quoted
        source = '"' + source.replace('"', '""') + '"'
    flags = ["--add-host", config["provider_host"] + ":" + config["provider_address"]]
    for target in [PROVIDER_BUNDLE_TARGET, *(config.get("provider_ca_targets") or [])]:
        flags += ["--mount", "type=bind," + source + ",target=" + target + ",readonly"]
    for name in PROVIDER_CA_ENV:
        flags += ["-e", name + "=" + PROVIDER_BUNDLE_TARGET]
    return flags


def gateway_token(secret, run_label, task):
    """The task's token for the run's gateway: it names the task, and only the gateway can check it."""
    mac = hmac.new(secret, TOKEN_CONTEXT + run_label.encode() + b"\0" + task.encode(), hashlib.sha256).hexdigest()
    return TOKEN_PREFIX + "." + task + "." + mac


def write_token_env(config, task):
    """The per-task env file with the task's gateway token (0600, next to the secret, never mounted).

    Returns its path, or None when it cannot be made (the creation is then refused: fail closed)."""
    secret_file = config["gateway_secret_file"]
    try:
        with open(secret_file, encoding="ascii") as handle:
            secret = bytes.fromhex(handle.read().strip())
        if len(secret) < 16:
            return None
        path = os.path.join(os.path.dirname(secret_file), "agent-" + task + ".env")
        data = (KEY_ENV_IN_AGENT + "=" + gateway_token(secret, config["run_label"], task) + "\n").encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return path
    except (OSError, ValueError, TypeError):
        return None


def unrevoke(config, task):
    """A new agent-<task> holds the task's token again: a revocation left by an earlier `rm` of that
    name (a runner that clears a name before it creates it) is set aside, kept under a dated name."""
    path = evidence_path(config, task + AGENT_REMOVED_SUFFIX)
    if path is None:
        return
    try:
        os.rename(path, f"{path}.before-{time.time_ns()}")
    except OSError:
        pass


def format_cpus(cpus):
    """`2` rather than `2.0`; docker accepts both, humans read the first."""
    value = float(cpus)
    return str(int(value)) if value.is_integer() else repr(value)
