"""Two callers of ensure_demo_pack_image at once (two xdist workers) build the pack image once.

The Docker client and the wheel downloads are stood in for: what is under test is the check-then-build
sequence, which without a lock lets both callers see the tag missing and both build it.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from cowork_adapter.demo import pack_image


class FakeImages:
    def __init__(self) -> None:
        self.tagged: dict[str, SimpleNamespace] = {}
        self.builds: list[str] = []
        self.guard = threading.Lock()

    def get(self, ref: str):
        if ref == "cowork-testbed/base:bookworm":
            return SimpleNamespace(id="sha256:base", labels={})
        with self.guard:
            if ref in self.tagged:
                return self.tagged[ref]
        raise pack_image.docker.errors.ImageNotFound(ref)

    def build(self, *, tag: str, labels: dict, **_kwargs):
        with self.guard:
            self.builds.append(tag)
            number = len(self.builds)
        time.sleep(0.5)  # a build takes a while: the other caller's check lands inside it
        image = SimpleNamespace(id=f"sha256:build-{number}", labels=labels)
        with self.guard:
            self.tagged[tag] = image
        return image, iter(())


def test_concurrent_callers_build_the_pack_image_once(tmp_path, monkeypatch):
    monkeypatch.setenv("COWORK_ADAPTER_CACHE", str(tmp_path / "cache"))
    images = FakeImages()

    class FakeClient:
        def __init__(self, **_kwargs) -> None:
            self.images = images

        def close(self) -> None:
            pass

    monkeypatch.setattr(pack_image.docker, "DockerClient", FakeClient)
    monkeypatch.setattr(pack_image, "build_wheelhouse", lambda *a, **k: [])
    start = threading.Barrier(2)
    results: list[tuple[str, str]] = []

    def caller() -> None:
        start.wait()
        results.append(pack_image.ensure_demo_pack_image("unix:///nowhere.sock"))

    threads = [threading.Thread(target=caller) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(images.builds) == 1, images.builds
    assert len(results) == 2 and results[0] == results[1]  # both got the one image built
    assert (tmp_path / "cache" / "locks").is_dir()
