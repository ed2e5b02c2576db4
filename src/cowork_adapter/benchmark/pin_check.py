"""The benchmark a run executes is its pinned commit, byte for byte (issue 27, deliverable 5).

`git status` cannot say so: a file marked skip-worktree, a `refs/replace/` object, or an object
file rewritten under its own id all leave it clean. So the pin is checked from the commit id down:
the commit object and every tree object must hash to their own ids, and every file of the run's
clone must hash (`git hash-object`, one process for all of them) to the blob id its pinned tree
names. Nothing else may stand in the clone.

One thing may differ: a path whose pinned blob the object store lacks. The public snapshot of Cowork
Bench lacks the PostgreSQL seed `db/init.sql.gz`, so an operator stands something in for it (a file
marked skip-worktree, or a replace object); such a substitute is accepted, recorded and disclosed.
A substitute for any path whose blob the store holds (a runner, an evaluator, a task file) is refused.

Every git command here runs with replacements off (GIT_NO_REPLACE_OBJECTS) and without the
caller's GIT_* variables, so what is read is the pinned objects themselves.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import Refusal
from ..fileio import sha256_file
from ..schemas.manifest import BenchSubstitute, BenchVerification
from ..vocab import SubstituteKind

GIT_TIMEOUT = 300
GITLINK = "160000"  # a submodule: a commit id, no content in the clone
SYMLINK = "120000"
SCOPE = "every path of the pinned commit's tree"
ONLY_MISSING = "only a blob missing from the object store (the database seed) may be substituted"
SHOWN = 3  # differing paths named in a refusal


@dataclass(frozen=True)
class PinnedPath:
    path: str  # as the filesystem names it (os.fsdecode of the tree's bytes)
    mode: str
    oid: str


def _git(repo: Path, *args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=data, capture_output=True, env=env, timeout=GIT_TIMEOUT, check=False
    )


def _algo(commit: str) -> str:
    return "sha256" if len(commit) == 64 else "sha1"


def _object_id(algo: str, kind: bytes, body: bytes) -> str:
    digest = hashlib.new(algo, b"%s %d\0" % (kind, len(body)))
    digest.update(body)
    return digest.hexdigest()


def _batch(repo: Path, oids: list[str]) -> dict[str, tuple[bytes, bytes] | None]:
    """{oid: (type, body)} from one `git cat-file --batch`; None for an object the store lacks."""
    out = _git(repo, "cat-file", "--batch", data="".join(f"{o}\n" for o in oids).encode())
    if out.returncode != 0:
        raise Refusal(
            "bench",
            f"git cat-file could not read the objects of {repo}: {out.stderr.decode(errors='replace').strip()[:200]}.",
        )
    found: dict[str, tuple[bytes, bytes] | None] = {}
    buf, pos = out.stdout, 0
    while pos < len(buf):
        end = buf.index(b"\n", pos)
        header = buf[pos:end].split()
        pos = end + 1
        if len(header) == 2 and header[1] == b"missing":
            found[header[0].decode()] = None
            continue
        size = int(header[2])
        found[header[0].decode()] = (header[1], buf[pos : pos + size])
        pos += size + 1
    return found


def _tree_entries(body: bytes, width: int):
    """(mode, name, oid) of one tree object's body."""
    pos = 0
    while pos < len(body):
        space = body.index(b" ", pos)
        nul = body.index(b"\0", space)
        yield body[pos:space].decode(), body[space + 1 : nul], body[nul + 1 : nul + 1 + width].hex()
        pos = nul + 1 + width


def pinned_paths(repo: Path, commit: str) -> list[PinnedPath]:
    """Every non-tree entry of the pinned commit's tree, read from objects that each hash to their id.

    `ls-tree -r -t` only says which tree objects to fetch; their content is taken from one
    `cat-file --batch` and checked against each id, from the commit down (an object rewritten in
    the store under its old id is refused here, not trusted).
    """
    algo = _algo(commit)
    width = hashlib.new(algo).digest_size
    listing = _git(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", commit)
    if listing.returncode != 0:
        raise Refusal(
            "bench",
            f"the pinned commit {commit[:12]}'s tree cannot be read in {repo}: "
            f"{listing.stderr.decode(errors='replace').strip()[:200]}.",
        )
    trees = [
        e.split(b"\t", 1)[0].split()[2].decode()
        for e in listing.stdout.split(b"\0")
        if e.split(b" ", 2)[1:2] == [b"tree"]
    ]
    objects = _batch(repo, [commit, f"{commit}^{{tree}}", *trees])  # ls-tree lists the subtrees only
    verified: dict[str, bytes] = {}
    for oid, got in objects.items():
        if got is not None and _object_id(algo, got[0], got[1]) == oid:
            verified[oid] = got[1]
    if commit not in verified or (objects[commit] or (b"",))[0] != b"commit":
        raise Refusal("bench", f"the pinned commit {commit[:12]} in {repo} is missing or does not hash to its id.")
    root = verified[commit].split(b"\n", 1)[0].removeprefix(b"tree ").decode()
    paths: list[PinnedPath] = []
    pending = [(b"", root)]
    while pending:
        prefix, tree = pending.pop()
        if tree not in verified:
            raise Refusal(
                "bench",
                f"the tree object {tree[:12]} of the pinned commit {commit[:12]} in {repo} "
                "is missing or does not hash to its id.",
            )
        for mode, name, oid in _tree_entries(verified[tree], width):
            if mode == "40000":
                pending.append((prefix + name + b"/", oid))
            else:
                paths.append(PinnedPath(os.fsdecode(prefix + name), mode, oid))
    return sorted(paths, key=lambda p: p.path)


def object_facts(repo: Path, oids: set[str]) -> dict[str, tuple[str, int] | None]:
    """{id: (type, size), or None when the object store lacks it} (one `cat-file --batch-check`)."""
    out = _git(repo, "cat-file", "--batch-check", data="".join(f"{o}\n" for o in sorted(oids)).encode())
    if out.returncode != 0:
        raise Refusal("bench", f"git cat-file could not check the objects of {repo}.")
    rows = (line.split() for line in out.stdout.decode().splitlines())
    return {r[0]: (None if r[1] == "missing" else (r[1], int(r[2]))) for r in rows}


def _skip_worktree(repo: Path) -> list[str]:
    """Index paths marked skip-worktree (`ls-files -v`: S, or s when also assume-unchanged)."""
    out = _git(repo, "ls-files", "-v", "-z")
    if out.returncode != 0:
        raise Refusal("bench", f"git ls-files failed in {repo}.")
    return sorted(os.fsdecode(e[2:]) for e in out.stdout.split(b"\0") if e[:2] in (b"S ", b"s "))


def _replacements(repo: Path) -> dict[str, str]:
    out = _git(repo, "for-each-ref", "--format=%(refname:strip=2) %(objectname)", "refs/replace/")
    if out.returncode != 0:
        raise Refusal("bench", f"git for-each-ref failed in {repo}.")
    pairs = (line.split() for line in out.stdout.decode(errors="replace").splitlines())
    return {p[0]: p[1] for p in pairs if len(p) == 2}


def _shown(path: str) -> str:
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def accepted_substitutes(checkout: Path, commit: str) -> list[BenchSubstitute]:
    """The operator checkout's substitutes, each for a pinned blob the store lacks; anything else
    (and a missing blob nothing stands in for) is refused before the run root exists."""
    pinned = pinned_paths(checkout, commit)
    by_path = {p.path: p for p in pinned}
    facts = object_facts(checkout, {p.oid for p in pinned if p.mode != GITLINK})
    missing = {oid for oid, fact in facts.items() if fact is None}
    missing_at = {p.path: p.oid for p in pinned if p.oid in missing}
    subs: list[BenchSubstitute] = []
    for path in _skip_worktree(checkout):
        if path not in missing_at:
            held = (
                "a path the pinned commit does not have"
                if path not in by_path
                else "a file whose pinned blob the object store holds"
            )
            raise Refusal(
                "bench",
                f"the benchmark checkout {checkout} marks {_shown(path)} skip-worktree, {held}: "
                f"{ONLY_MISSING}, so undo it (git update-index --no-skip-worktree, then git checkout the file).",
            )
        if not (checkout / path).is_file() or (checkout / path).is_symlink():
            raise Refusal(
                "bench",
                f"the benchmark checkout {checkout} marks {_shown(path)} skip-worktree but holds no regular file "
                "there.",
            )
        subs.append(BenchSubstitute(path=path, pinned_blob=missing_at[path], kind=SubstituteKind.SKIP_WORKTREE))
    replacements = _replacements(checkout)
    kinds = object_facts(checkout, set(replacements.values())) if replacements else {}
    for original, replacement in sorted(replacements.items()):
        paths = sorted(p for p, oid in missing_at.items() if oid == original)
        named = next((p.path for p in pinned if p.oid == original), None)
        if not paths:
            what = (
                f"the pinned blob of {_shown(named)}, which the object store holds"
                if named
                else "no blob missing from the pinned tree"
            )
            raise Refusal(
                "bench",
                f"the benchmark checkout {checkout} replaces object {original[:12]} ({what}) through "
                f"refs/replace/: {ONLY_MISSING}, so remove it (git replace -d {original[:12]}).",
            )
        if (kinds.get(replacement) or ("",))[0] != "blob":
            raise Refusal(
                "bench",
                f"the benchmark checkout {checkout} replaces the missing blob of {_shown(paths[0])} "
                f"with {replacement[:12]}, which is not a blob in its object store.",
            )
        subs.extend(
            BenchSubstitute(path=p, pinned_blob=original, kind=SubstituteKind.REPLACE_OBJECT, replacement=replacement)
            for p in paths
        )
    bare = sorted(set(missing_at) - {s.path for s in subs})
    if bare:
        raise Refusal(
            "bench",
            f"the pinned blob of {_shown(bare[0])} is missing from the object store of {checkout} and nothing "
            "stands in for it (write a stand-in there and mark it skip-worktree, or add a refs/replace/ object).",
        )
    return subs


def _on_disk(root: Path) -> dict[str, str]:
    """{relative path: file | link | other} of everything under the clone but its .git; no link followed."""
    found: dict[str, str] = {}
    stack = [("", str(root))]
    while stack:
        prefix, folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if rel == ".git":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", entry.path))
                elif entry.is_symlink():
                    found[rel] = "link"
                else:
                    found[rel] = "file" if entry.is_file(follow_symlinks=False) else "other"
    return found


def _stdin_path(path: str) -> bytes:
    """A path as `hash-object --stdin-paths` reads it: C-quoted when it would otherwise break a line."""
    raw = os.fsencode(path)
    if b"\n" not in raw and not raw.startswith(b'"'):
        return raw
    return b'"' + b"".join(b"\\%03o" % c if c < 0x20 or c in (0x22, 0x5C, 0x7F) else bytes([c]) for c in raw) + b'"'


def hash_files(repo: Path, paths: list[str]) -> list[str]:
    """Blob ids of the files at `paths` (relative to repo), bytes as they are: one `git hash-object`."""
    if not paths:
        return []
    out = _git(
        repo, "hash-object", "--no-filters", "--stdin-paths", data=b"".join(_stdin_path(p) + b"\n" for p in paths)
    )
    oids = out.stdout.decode().split()
    if out.returncode != 0 or len(oids) != len(paths):
        raise Refusal(
            "bench",
            f"git hash-object could not hash the run's benchmark clone {repo}: "
            f"{out.stderr.decode(errors='replace').strip()[:200]}.",
        )
    return oids


def verify_copy(copy: Path, commit: str, substitutes: list[BenchSubstitute]) -> BenchVerification:
    """Every file of the run's clone hashes to its pinned blob, the accepted substitutes aside;
    nothing else stands there. Refuses, naming the first differing paths, on any difference."""
    started = time.monotonic()
    pinned = pinned_paths(copy, commit)
    facts = object_facts(copy, {p.oid for p in pinned if p.mode != GITLINK})
    missing = {oid for oid, fact in facts.items() if fact is None}
    accepted = {s.path: s for s in substitutes}
    disk = _on_disk(copy)
    differing = sorted(set(disk) - {p.path for p in pinned})  # not in the pinned tree at all
    to_hash: list[PinnedPath] = []
    links = 0
    used: list[BenchSubstitute] = []
    for p in pinned:
        if p.mode == GITLINK:
            continue
        if disk.get(p.path) != ("link" if p.mode == SYMLINK else "file"):
            differing.append(p.path)
        elif p.oid in missing:
            if p.path not in accepted or disk[p.path] != "file":
                differing.append(p.path)
            else:
                used.append(accepted[p.path].replace(sha256=sha256_file(copy / p.path)))
        elif p.mode == SYMLINK:  # a link's blob is its target: compared, never followed
            links += 1
            if _object_id(_algo(commit), b"blob", os.fsencode(os.readlink(copy / p.path))) != p.oid:
                differing.append(p.path)
        else:
            to_hash.append(p)
    oids = hash_files(copy, [p.path for p in to_hash])
    differing += [p.path for p, oid in zip(to_hash, oids, strict=True) if oid != p.oid]
    if differing:
        differing.sort()
        more = f" (and {len(differing) - SHOWN} more)" if len(differing) > SHOWN else ""
        raise Refusal(
            "bench",
            f"the run's benchmark clone differs from the pinned commit {commit[:12]} at "
            f"{', '.join(_shown(d) for d in differing[:SHOWN])}{more}: the runner, evaluators and tasks "
            f"must be the pinned ones byte for byte and {ONLY_MISSING}.",
        )
    return BenchVerification(
        scope=SCOPE,
        files=len(to_hash) + links,
        bytes=sum((facts[p.oid] or ("", 0))[1] for p in to_hash),
        substitutes=used,
        seconds=round(time.monotonic() - started, 3),
    )
