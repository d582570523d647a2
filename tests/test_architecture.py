"""The architecture invariants of ARCHITECTURE.md, checked."""

import ast
import subprocess
import sys
from pathlib import Path

from sparkls.text.document import Document

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "server" / "sparkls"


def test_only_the_lsp_layer_and_the_demo_import_lsprotocol_or_pygls():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("lsp/") or rel in ("tools/demo.py", "tools/client.py"):
            continue
        text = path.read_text()
        if "import lsprotocol" in text or "from lsprotocol" in text or "from pygls" in text or "import pygls" in text:
            offenders.append(rel)
    assert offenders == []


def test_the_engine_backends_import_their_libraries_lazily():
    code = (
        "import sys, sparkls.engine.llamacpp, sparkls.engine.vllm, sparkls.engine.openai, sparkls.lsp.app, "
        "sparkls.completion.pipeline, sparkls.tools.doctor; "
        "print([m for m in ('llama_cpp', 'vllm', 'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_only_their_own_backend_modules_import_vllm_or_llama_cpp():
    owners = {"vllm": "engine/vllm.py", "llama_cpp": "engine/llamacpp.py"}
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).as_posix()
        text = path.read_text()
        for lib, owner in owners.items():
            if (f"import {lib}" in text or f"from {lib}" in text) and rel != owner:
                offenders.append((rel, lib))
    assert offenders == []


def test_the_engine_layer_never_imports_pygls():
    offenders = [
        p.name for p in (PKG / "engine").rglob("*.py") if "pygls" in p.read_text() or "lsprotocol" in p.read_text()
    ]
    assert offenders == []


def test_the_code_passes_the_chosen_lint_rules():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "server", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_code_is_formatted_as_ruff_formats_it():
    r = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "server", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_types_check():
    """pyright: strict on the pure core, basic elsewhere (pyrightconfig.json)."""
    r = subprocess.run([sys.executable, "-m", "pyright"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def _import_graph() -> dict[str, set[str]]:
    """Module -> the sparkls modules it imports (every import statement, also inside functions and
    `TYPE_CHECKING` blocks), from the source itself."""

    def name_of(path: Path) -> str:
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sparkls":
                for alias in node.names:  # `from sparkls.edit import diff` imports the module edit.diff
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.split(".")[0] == "sparkls")
        graph[name] = deps - {name}
    return graph


def _node(module: str) -> str:
    """A folder under server/sparkls/ is one node; a top-level module (session, settings) is its own."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sparkls"


def _folder_graph() -> dict[str, set[str]]:
    folders: dict[str, set[str]] = {}
    for module, deps in _import_graph().items():
        folders.setdefault(_node(module), set()).update(_node(d) for d in deps)
    return {f: deps - {f} for f, deps in folders.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle found by depth-first search (a path back to a node on the current path)."""
    found, state = [], {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = "open"
        for d in sorted(graph.get(n, ())):
            if state.get(d) == "open":
                found.append([*path[path.index(d) :], d])
            elif d not in state:
                visit(d, [*path, d])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return found


def test_no_module_or_folder_imports_itself_through_others():
    assert _cycles(_import_graph()) == []
    assert _cycles(_folder_graph()) == []


def test_the_folders_stack_in_at_most_eight_levels():
    graph = _folder_graph()
    memo: dict[str, int] = {}

    def level(n: str) -> int:  # 0 for a folder importing no other; else one above its highest import
        if n not in memo:
            memo[n] = 1 + max((level(d) for d in graph[n]), default=-1)
        return memo[n]

    levels = {n: level(n) for n in graph}
    assert max(levels.values()) + 1 <= 8, levels
    # the order ARCHITECTURE.md describes
    assert levels["text"] < levels["workspace"] < levels["settings"] < levels["session"]
    assert levels["session"] < levels["completion"] < levels["lsp"] < levels["tools"]
    assert levels["session"] < levels["edit"] < levels["lsp"]


def test_the_session_imports_no_feature_and_the_engine_no_settings():
    graph = _import_graph()
    features = ("sparkls.completion", "sparkls.edit", "sparkls.lsp", "sparkls.tools")
    assert sorted(d for d in graph["sparkls.session"] if d.startswith(features)) == []
    engine = [
        d
        for m, deps in graph.items()
        if m.startswith("sparkls.engine")
        for d in deps
        if not d.startswith("sparkls.engine")
    ]
    assert engine == []


def test_no_function_is_longer_than_sixty_lines():
    long = [
        (p.relative_to(PKG).as_posix(), n.name, n.end_lineno - n.lineno + 1)
        for p in PKG.rglob("*.py")
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno - n.lineno + 1 > 60
    ]
    assert long == []


def test_the_settings_offer_exactly_the_layouts_and_templates_completion_has():
    from sparkls.completion import context, prompt
    from sparkls.settings import FAMILIES, LAYOUTS

    assert set(FAMILIES) == set(prompt.TEMPLATES)
    text = "import os\n\n" + "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40))
    doc = Document.open("file:///a.py", "python", 1, text)
    cursor = text.index("return x + 30") + 4
    built = {layout: context.build(doc, cursor, context.Budget(64, 32, 32), layout) for layout in LAYOUTS}
    assert len({(c.preamble, c.prefix, c.suffix, c.middle) for c in built.values()}) == len(LAYOUTS)


def test_ci_runs_the_readmes_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    blocks = readme.split("```sh\n")[1:]
    test_cmd = next(b.split("\n```")[0].strip() for b in blocks if "pytest" in b)
    assert test_cmd in ci


def test_the_front_door_documents_stay_short_enough_to_read():
    """README and ARCHITECTURE.md at most 12 KiB, benchmarks/README.md 15 KiB: the rest goes to docs/."""
    limits = {"README.md": 12, "ARCHITECTURE.md": 12, "benchmarks/README.md": 15}
    sizes = {name: len((ROOT / name).read_bytes()) for name in limits}
    assert all(sizes[name] <= kib * 1024 for name, kib in limits.items()), sizes
    for name in ("LICENSE", "CONTRIBUTING.md", "CHANGELOG.md"):
        assert (ROOT / name).is_file(), name


def test_no_two_modules_define_a_class_or_type_alias_of_the_same_name():
    """One name, one thing: a reader who meets `Frame` or `Engine` knows which it is without the import."""
    defined: dict[str, list[str]] = {}
    for path in sorted((ROOT / "server" / "sparkls").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                # CamelCase module-level names are type aliases here (constants are UPPER_CASE)
                names = [t.id for t in targets if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()]
            else:
                names = []
            for name in names:
                defined.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in defined.items() if len(paths) > 1} == {}


def test_each_test_module_is_named_for_the_module_it_tests():
    """tests/X/test_Y.py tests server/sparkls/X/Y.py (or the package X/Y/), tests/benchmarks/test_Y.py the script
    benchmarks/Y.py; tests/e2e/ runs the whole server, and this module checks the project."""
    tests = ROOT / "tests"
    strays = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        if rel.parts[0] == "e2e" or rel == Path("test_architecture.py"):
            continue
        tested = rel.with_name(rel.name.removeprefix("test_")).with_suffix("")
        if rel.parts[0] == "benchmarks":
            found = (ROOT / tested).with_suffix(".py").is_file()
        else:
            found = (PKG / tested).with_suffix(".py").is_file() or (PKG / tested / "__init__.py").is_file()
        if not found:
            strays.append(rel.as_posix())
    assert strays == []
