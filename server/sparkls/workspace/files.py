"""Workspace files read safely: exclusion globs for secrets, and an index that reads only files inside the
workspace roots (never an excluded, binary or oversize one), caching text and parsed documents by
(path, mtime, size). `refused` applies the same globs to open documents."""

from __future__ import annotations

import os
import re
import stat
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import translate
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

from sparkls.text.document import Document
from sparkls.workspace.imports import root_of

DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".env*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*.p12",
    "*.pfx",
    "secrets.*",
    "*.keystore",
    "*.jks",
    "*.kdbx",
    "credentials*",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".htpasswd",
    "*.tfstate*",
    ".git/",
    ".hg/",
    ".svn/",
    ".ssh/",
    ".gnupg/",
    ".aws/",
    "node_modules/",
    ".venv/",
    "__pycache__/",
)
DEFAULT_MAX_FILE_BYTES = 512 * 1024


# ---- exclusion ----------------------------------------------------------------------------------------------


def excluded(rel_path: str, globs: Sequence[str]) -> bool:
    """Gitignore-like, case-insensitive: a glob without `/` matches the basename at any depth, one ending in `/`
    any directory component, any other glob with `/` the whole relative path (fnmatch); `**/` also matches no
    folder at all (`**/secrets.yaml` is `secrets.yaml` at the root too, as in gitignore and VS Code)."""
    parts = [p.lower() for p in rel_path.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        return False
    base, directory, whole = _compiled(tuple(globs))
    return bool(base.match(parts[-1]) or whole.match("/".join(parts)) or any(map(directory.match, parts[:-1])))


@lru_cache(maxsize=16)
def _compiled(globs: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """The globs as three regexes: basename, directory component, whole path."""

    def one(patterns: list[str]) -> re.Pattern[str]:
        return re.compile("|".join(translate(p.lower()) for p in patterns) or "(?!)")

    every = [g for glob in globs for g in sorted(_without_folder_wildcards(glob))]
    return (
        one([g for g in every if "/" not in g]),
        one([g.strip("/") for g in every if g.endswith("/")]),
        one([g.lstrip("/") for g in every if "/" in g and not g.endswith("/")]),
    )


def _without_folder_wildcards(glob: str) -> set[str]:
    """`glob`, and the globs it becomes with any of its `**/` left out (each `**/` may match no folder)."""
    out: set[str] = set()
    todo = [glob]
    while todo:
        g = todo.pop()
        if g not in out:
            out.add(g)
            todo += [g[:i] + g[i + 3 :] for i in range(len(g)) if g.startswith("**/", i)]
    return out


def _excluded_anywhere(path: str, globs: Sequence[str]) -> bool:
    """For a file outside the roots: the globs against every tail of its path."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    return any(excluded("/".join(parts[i:]), globs) for i in range(len(parts)))


def uri_path(uri: str) -> Path | None:
    """The file path of a `file://` URI, or None for any other scheme."""
    u = urlparse(uri)
    return Path(url2pathname(unquote(u.path))) if u.scheme == "file" else None


def _refused(real: str, roots: Sequence[str], globs: Sequence[str]) -> bool:
    root = root_of(real, roots)
    return _excluded_anywhere(real, globs) if root is None else excluded(os.path.relpath(real, root), globs)


def refused(uri: str, index: WorkspaceIndex | None) -> bool:
    """Whether the document at `uri` matches the exclusion globs (the pipeline completes nothing there)."""
    path = uri_path(uri)
    target = os.path.realpath(path) if path is not None else unquote(urlparse(uri).path)
    globs = index.excludes if index is not None else DEFAULT_EXCLUDES
    roots = index.roots_str if index is not None else ()
    return _refused(target, roots, globs) or (path is not None and _refused(str(path), roots, globs))


# ---- reading ------------------------------------------------------------------------------------------------


@dataclass
class _Entry:
    key: tuple[int, int]  # (mtime_ns, size)
    text: str | None  # None: refused (binary)
    doc: Document | None = None  # parsed on first use


class WorkspaceIndex:
    """Reads files inside the workspace roots only, refusing excluded, binary (a NUL byte in the first 8 KiB),
    oversize and unreadable ones, and caches text and outline by (path, mtime_ns, size)."""

    def __init__(
        self,
        roots: Sequence[Path],
        excludes: Sequence[str] = DEFAULT_EXCLUDES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_cached_files: int = 256,
    ) -> None:
        self.roots = tuple(Path(os.path.realpath(r)) for r in roots)
        self.roots_str = sorted((str(r) for r in self.roots), key=len, reverse=True)  # the deepest root first
        self.excludes = tuple(excludes)
        self.max_file_bytes = max_file_bytes
        self.max_cached_files = max_cached_files
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()  # gather may run in worker threads

    def excluded(self, path: Path) -> bool:
        """Whether `path` (as given, or where its links lead) matches the exclusion globs."""
        return self._excluded(os.path.realpath(path), path)

    def _excluded(self, real: str, given: Path) -> bool:
        return _refused(real, self.roots_str, self.excludes) or (
            str(given) != real and _refused(os.path.abspath(given), self.roots_str, self.excludes)
        )

    def admits(self, uri: str, doc: Document) -> str | None:
        """The real path of an open document that may serve as context (a file inside the roots, not excluded,
        binary or oversize), else None."""
        path = uri_path(uri)
        if path is None or doc.is_binary or len(doc.text) > self.max_file_bytes:
            return None
        real = os.path.realpath(path)
        return None if root_of(real, self.roots_str) is None or self._excluded(real, path) else real

    def relative(self, path: Path) -> str:
        """`path` relative to the root holding it, with forward slashes (absolute when outside the roots)."""
        return self._relative(os.path.realpath(path))

    def _relative(self, real: str) -> str:
        root = root_of(real, self.roots_str)
        return Path(os.path.relpath(real, root) if root is not None else real).as_posix()

    def read(self, path: Path) -> str | None:
        """The text of a file, or None for anything refused."""
        entry = self._load(os.path.realpath(path), path)
        return entry.text if entry is not None else None

    def document(self, path: Path) -> Document | None:
        """The file as a parsed `Document` (cached like its text), or None when refused."""
        real = os.path.realpath(path)
        entry = self._load(real, path)
        if entry is None or entry.text is None:
            return None
        if entry.doc is None:
            entry.doc = Document.open(Path(real).as_uri(), None, 0, entry.text)
        return entry.doc

    def _load(self, real: str, given: Path) -> _Entry | None:
        if root_of(real, self.roots_str) is None or self._excluded(real, given):
            return None
        try:
            st = os.stat(real)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode) or st.st_size > self.max_file_bytes:
            return None
        key = (st.st_mtime_ns, st.st_size)
        with self._lock:
            entry = self._cache.get(real)
            if entry is not None and entry.key == key:
                self._cache.move_to_end(real)
                return entry if entry.text is not None else None
        try:
            with open(real, "rb") as f:
                data = f.read(self.max_file_bytes + 1)
        except OSError:
            return None
        binary = b"\x00" in data[:8192] or len(data) > self.max_file_bytes
        entry = _Entry(key, None if binary else data.decode("utf-8", "replace"))
        with self._lock:
            self._cache[real] = entry
            while len(self._cache) > self.max_cached_files:
                self._cache.popitem(last=False)
        return entry if entry.text is not None else None
