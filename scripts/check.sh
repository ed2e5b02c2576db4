#!/usr/bin/env bash
# The linter and the type checker, as .ci/run runs them before the test suites (docs/testing.md: The
# checkers). Their settings are in pyproject.toml ([tool.ruff], [tool.mypy]); a finding exits non-zero.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
failed=()
step() {  # step NAME COMMAND...: run it, and remember NAME when it finds something
  local name=$1; shift
  echo "check: $name: $*"
  "$@" || failed+=("$name")
}
step "ruff" .venv/bin/ruff check .
# One formatter, settled once (pyproject.toml [tool.ruff]): a diff is about behaviour, never layout.
step "ruff format" .venv/bin/ruff format --check .
# The demo's bundled benchmark and stub seed imitate other projects (pyproject.toml [tool.ruff]): real
# errors only, as the benchmark image's Python 3.10.
step "ruff (demo bench and stub seed)" .venv/bin/ruff check --isolated --select F,E9 --target-version py310 \
  src/cowork_adapter/demo/bench src/cowork_adapter/demo/stub_seed
step "mypy" .venv/bin/mypy
# The container code again as the Python of the benchmark's image (3.10; stdlib only).
step "mypy (container code as 3.10)" .venv/bin/mypy --python-version 3.10 src/cowork_adapter/container
if [ ${#failed[@]} -gt 0 ]; then
  printf 'check: FAILED: %s found something (see above; bash scripts/check.sh runs them again)\n' "${failed[*]}" >&2
  exit 1
fi
echo "check: ruff and mypy found nothing"
