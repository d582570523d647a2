"""`sparkls doctor`: what this install can run, and what is missing (never downloads anything)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys

from sparkls import syntax
from sparkls.engine.llamacpp import default_threads
from sparkls.engine.model_files import BUNDLED, DEFAULT_MODEL, ModelUnavailable, cache_dir, ensure_bundled


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def run_doctor() -> int:
    problems: list[str] = []
    print(f"sparkls doctor (python {sys.version.split()[0]}, {os.cpu_count()} cores)")
    for dist in ("pygls", "lsprotocol", "tree-sitter", "llama-cpp-python"):
        v = _version(dist)
        print(f"  {dist:<18} {v or 'MISSING'}")
        if v is None:
            problems.append(f"{dist} is not installed" + (
                " (the embedded engine needs it: CMAKE_ARGS=\"-DLLAVA_BUILD=OFF\" pip install 'sparkls[llamacpp]')"
                if dist == "llama-cpp-python" else ""))
    print(f"  engine default     llamacpp, threads {default_threads()} (max(1, cores - 1))")
    print(f"  model cache        {cache_dir()}")
    for name, model in BUNDLED.items():
        installed = all(importlib.util.find_spec(p) is not None for p in model.packages)
        state = "parts installed" if installed else "parts not installed"
        if installed and name == DEFAULT_MODEL:
            try:
                path = ensure_bundled(name)
                state = f"ok, sha256 verified: {path}"
            except ModelUnavailable as e:
                state = f"BROKEN: {e}"
                problems.append(str(e))
        elif name == DEFAULT_MODEL:
            problems.append(f"default model {model.name} is not installed: pip install 'sparkls[model]'")
        print(f"  model {name:<18} {state}")
    grammars = syntax.available_grammars()
    missing = [lang for lang, ok in grammars.items() if not ok]
    print(f"  grammars           {', '.join(lang for lang, ok in grammars.items() if ok)}")
    if missing:
        problems.append(f"grammars missing: {', '.join(missing)} (plain-text context for them)")
    if problems:
        print("\nmissing or broken:")
        for p in problems:
            print(f"  - {p}")
        return 1
    print("\nall good")
    return 0
