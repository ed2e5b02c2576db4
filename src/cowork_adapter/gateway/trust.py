"""Which CA files the Pythons of the run's image read, so the run CA can be put in their place.

SSL_CERT_FILE is not enough for Ouroboros 6.97.2: in its worker processes it calls the model
through `httpx.Client(trust_env=False)` (ouroboros/llm.py _make_no_proxy_client), and httpx then
ignores every variable and reads certifi's `cacert.pem`. So the shim also mounts the run's bundle
(the host's public roots plus the run CA) read-only over the `certifi.where()` file of each Python
of the image (the seed's venv, the benchmark's, mcp-proxy's). Those paths are asked of the image
once per run by a short container carrying the run's label, without network, like the image's
other probes (image/derived.py image_python).
"""

from __future__ import annotations

import json
import re

import docker

from ..custody.labels import RUN_LABEL_KEY
from ..errors import Refusal
from ..host.daemon import docker_client
from ..image.derived import DETECT_LIMITS

# The derived image's interpreters (container/runconfig.py ImagePaths, and the base's own).
PYTHONS = (
    "/opt/ouroboros-venv/bin/python",
    "/opt/venv/bin/python3",
    "/opt/mcp-proxy-venv/bin/python",
    "/usr/bin/python3",
)
SAFE_PATH = re.compile(r"/[A-Za-z0-9_./+-]{1,4000}")
_PROBE = (
    'for py in "$@"; do [ -x "$py" ] && "$py" -I -c '
    "\"import certifi,json,os;p=os.path.realpath(certifi.where());print(json.dumps(p) if os.path.isfile(p) else '')\""
    " 2>/dev/null; done; true"
)


def certifi_files(docker_host: str, image: str, run_label: str) -> list[str]:
    """The distinct cacert files the image's Pythons' certifi names (absolute, regular files)."""
    try:
        client = docker_client(docker_host, 120)
        try:
            out = client.containers.run(
                image,
                ["-c", _PROBE, "probe", *PYTHONS],
                entrypoint=["/bin/sh"],
                remove=True,
                labels={RUN_LABEL_KEY: run_label},
                network_disabled=True,
                **DETECT_LIMITS,
            )
        finally:
            client.close()
    except docker.errors.DockerException as exc:
        raise Refusal(
            "provider_tls",
            f"the image {image} could not be asked where its Pythons read their CA "
            f"certificates ({type(exc).__name__}); give the agent the key with "
            "--key-in-agent, or use --llm-gateway.",
        ) from None
    found: list[str] = []
    for line in out.decode(errors="replace").splitlines():
        try:
            path = json.loads(line) if line.strip() else ""
        except ValueError:
            continue
        # A --mount target is one CSV field of the shim's flags: plain absolute paths only.
        if isinstance(path, str) and SAFE_PATH.fullmatch(path) and path not in found:
            found.append(path)
    return found
