"""The one compiled part: the audit's JSON Lines scanner (src/cowork_adapter/_jsonl.c).

Everything else is declared in pyproject.toml; setuptools reads both.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cowork_adapter._jsonl",
            ["src/cowork_adapter/_jsonl.c"],
            extra_compile_args=["-std=c11", "-Wall", "-Wextra"],
        )
    ]
)
