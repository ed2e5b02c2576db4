"""Published Cowork Bench results (benchmark README at d943e75), shown beside a run's score."""

from __future__ import annotations

CAVEAT = (
    "Published rows come from other engines, harnesses, dates and infrastructure; without a paired "
    "run (same tasks, same harness, same time) the difference from this run is not causal."
)

# (model, context window, passed, denominator, method, note)
PUBLISHED_ROWS: tuple[tuple[str, str, int, int, str, str], ...] = (
    ("Kimi K3 (2.8T-A32B MoE)", "1M", 363, 496, "parallel", ""),
    ("GLM-5.2 (FP8)", "1M", 343, 496, "parallel", ""),
    ("MiniMax-M3 (428B-A23B, FP8)", "400k", 323, 496, "parallel", ""),
    ("Qwen 3.5 397B-A17B (BF16)", "262k", 312, 496, "solo", ""),
    ("Qwen 3.6 27B dense (FP8)", "262k", 309, 496, "solo", ""),
    ("Qwen 3.6 35B-A3B (FP8)", "262k", 300, 496, "solo", ""),
    ("Qwen 3.5 122B-A10B", "262k", 265, 496, "parallel", ""),
    ("Gemma 4 31B dense (FP8)", "262k", 243, 496, "solo", ""),
    ("GigaCode Agentic v1.6 (80B-A3B)", "262k", 120, 421, "parallel, ex-stall", "raw 120/496 = 24.2 %"),
    ("GigaChat-3.5 (432B-A28B)", "130k", 119, 496, "solo", "functions-API proxy, one tool per turn"),
    ("GigaChat-3-Max (90B dense, FP8)", "130k", 41, 375, "parallel, ex-stall", "raw 41/496 = 8.3 %"),
    ("GigaChat-3-Pro", "130k", 24, 496, "solo", "functions-API proxy, one tool per turn"),
)


def reference_rows() -> list[dict[str, object]]:
    return [
        {
            "model": m,
            "context_window": cw,
            "passed": k,
            "denominator": n,
            "pass_at_1": k / n,
            "method": method,
            "note": note,
        }
        for m, cw, k, n, method, note in PUBLISHED_ROWS
    ]
