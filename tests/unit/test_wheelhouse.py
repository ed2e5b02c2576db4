"""build_wheelhouse: records with real hashes, cache reuse without pip, damaged cache refused.

pip runs for real, offline, against a tiny pure-python wheel made here (--no-index --find-links).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from cowork_adapter.image.wheelhouse import RECORDS_FILE, build_wheelhouse, inputs_key, records_json

PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64"]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_tiny_wheel(folder: Path, version: str = "0.1") -> Path:
    """A valid pure-python wheel `tinypkg` with one module."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"tinypkg-{version}.dist-info"
    files = {
        "tinypkg.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: tinypkg\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    lines = [_record_line(name, data) for name, data in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(lines) + "\n").encode()
    path = folder / f"tinypkg-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def _build(index: Path, dest: Path, cache: Path, requirement: str = "tinypkg==0.1"):
    return build_wheelhouse(
        [requirement],
        dest,
        python_version="3.11",
        platforms=PLATFORMS,
        pip_args=["--no-index", "--find-links", str(index)],
        cache_dir=cache,
        timeout=120,
    )


def test_records_carry_the_real_hash_and_size(tmp_path):
    wheel = make_tiny_wheel(tmp_path / "index")
    records = _build(tmp_path / "index", tmp_path / "dest", tmp_path / "cache")
    assert [r.filename for r in records] == [wheel.name]
    copied = tmp_path / "dest" / wheel.name
    assert records[0].sha256 == hashlib.sha256(copied.read_bytes()).hexdigest()
    assert records[0].sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert records[0].size == wheel.stat().st_size
    assert wheel.name in records_json(records)


def test_second_build_is_served_from_the_cache(tmp_path):
    wheel = make_tiny_wheel(tmp_path / "index")
    first = _build(tmp_path / "index", tmp_path / "dest1", tmp_path / "cache")
    wheel.unlink()  # pip could no longer find it: only the cache can answer now
    second = _build(tmp_path / "index", tmp_path / "dest2", tmp_path / "cache")
    assert second == first
    assert (tmp_path / "dest2" / first[0].filename).is_file()
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 1


def test_cache_key_depends_on_every_input():
    base = dict(python_version="3.11", platforms=PLATFORMS)
    key = inputs_key(["a==1"], **base)
    assert key == inputs_key(["a==1"], **base)
    assert key != inputs_key(["a==2"], **base)
    assert key != inputs_key(["a==1"], python_version="3.12", platforms=PLATFORMS)
    assert key != inputs_key(["a==1"], python_version="3.11", platforms=PLATFORMS[:1])
    assert key != inputs_key(["a==1"], **base, pip_args=["--no-index"])


def test_damaged_cache_entry_is_refused(tmp_path):
    make_tiny_wheel(tmp_path / "index")
    records = _build(tmp_path / "index", tmp_path / "dest", tmp_path / "cache")
    entry = next(p for p in (tmp_path / "cache").iterdir() if (p / RECORDS_FILE).exists())
    (entry / records[0].filename).write_bytes(b"not the wheel")
    with pytest.raises(RuntimeError, match="does not match"):
        _build(tmp_path / "index", tmp_path / "dest2", tmp_path / "cache")


def test_unresolvable_requirement_raises_and_leaves_no_cache_entry(tmp_path):
    (tmp_path / "index").mkdir()
    with pytest.raises(RuntimeError, match="pip download failed"):
        _build(tmp_path / "index", tmp_path / "dest", tmp_path / "cache", requirement="nosuchpkg==9")
    assert not any((p / RECORDS_FILE).exists() for p in (tmp_path / "cache").iterdir())
    assert not any(p.name.startswith(".") for p in (tmp_path / "cache").iterdir())
