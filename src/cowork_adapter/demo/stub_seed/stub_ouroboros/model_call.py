"""One real chat-completions request per round, when OPENAI_COMPATIBLE_BASE_URL is set.

The stand-in still decides everything by its scripted plan; the request only makes the model
traffic real (method, path, credential, usage accounting) for whatever endpoint or gateway is in
front of it. The answer's `usage` (tokens, and `cost` where the endpoint gives one) is what the
round's usage row records.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

PREFIX = "openai-compatible::"
TIMEOUT_SEC = 60


class ModelCallError(Exception):
    """The endpoint refused or failed the request: the task ends llm_api_error."""


def chat_once(base_url: str, credential: str, model: str, round_no: int) -> dict:
    """POST <base_url>/chat/completions; returns the answer's usage object (may be empty)."""
    body = {"model": model[len(PREFIX):] if model.startswith(PREFIX) else model,
            "messages": [{"role": "user", "content": f"stub-ouroboros round {round_no}"}], "max_tokens": 16}
    request = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + credential})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SEC) as answer:
            data = json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise ModelCallError(f"HTTP {exc.code} from the model endpoint: {detail}") from None
    except (OSError, ValueError) as exc:
        raise ModelCallError(f"the model endpoint failed: {type(exc).__name__}") from None
    usage = data.get("usage") if isinstance(data, dict) else None
    return usage if isinstance(usage, dict) else {}
