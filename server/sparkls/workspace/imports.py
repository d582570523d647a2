"""What a file imports, and which files of the workspace that names.

`imports` reads a document's import statements with tree-sitter (Python, JavaScript/TypeScript, Go, Rust, Java)
into `ImportRef`s, with the names each brings in where the syntax gives them; `resolve` turns one into the
existing files it names, only ever inside the workspace roots (compared as resolved paths, so neither a
symlink nor `..` leads out). Nothing here reads a file's content except a `go.mod`'s module line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tree_sitter import Node

from sparkls.text.document import Document

JS_LANGUAGES = frozenset({"javascript", "javascriptreact", "typescript", "typescriptreact"})
_JS_EXTS = (".ts", ".tsx", ".d.ts", ".js", ".jsx", ".mjs", ".cjs", ".mts", ".cts")

# Statements that may hold imports (not function bodies: an import there is local to the function).
_IMPORT_HOLDERS = frozenset(
    {
        "module",
        "program",
        "source_file",
        "if_statement",
        "try_statement",
        "block",
        "else_clause",
        "elif_clause",
        "except_clause",
        "finally_clause",
        "with_statement",
        "statement_block",
        "lexical_declaration",
        "variable_declaration",
        "variable_declarator",
        "expression_statement",
        "assignment_expression",
        "member_expression",
        "await_expression",
        "import_spec_list",
        "import_declaration",
    }
)


@dataclass(frozen=True)
class ImportRef:
    """One import as written: `module` in the language's notation (".segment", "./m", "crate::a", "com.x.Y"),
    the `names` it brings in where the syntax gives them, `kind` "mod" for Rust's `mod foo;`, and for Java the
    importing file's `package` (it locates the source root)."""

    language: str
    module: str
    names: tuple[str, ...] = ()
    kind: str = "import"
    package: str = ""


def _text(doc: Document, a: int, b: int) -> str:
    return doc.source[a:b].decode("utf-8", "replace")


def root_of(real: str, roots: Sequence[str]) -> str | None:
    """The first of `roots` (resolved paths; sorted deepest first) that holds the resolved path `real`."""
    return next((r for r in roots if real == r or real.startswith(r.rstrip(os.sep) + os.sep)), None)


def imports(doc: Document) -> list[ImportRef]:
    """What `doc` imports, in source order (top-level and conditional imports, not those inside functions)."""
    if doc.tree is None:
        return []
    refs: list[ImportRef] = []
    lang = doc.language
    package = ""
    stack = [doc.tree.root_node]
    while stack:
        node = stack.pop()
        t = node.type
        if lang == "python" and t in ("import_statement", "import_from_statement"):
            refs.extend(_python_imports(doc, node))
        elif lang in JS_LANGUAGES and t in ("import_statement", "export_statement"):
            refs.extend(_js_imports(doc, node))
        elif lang == "go" and t == "import_spec":
            path = node.child_by_field_name("path")
            refs.extend([ImportRef(lang, _text(doc, path.start_byte, path.end_byte).strip('"`'))] if path else [])
        elif lang == "rust" and t == "mod_item" and node.child_by_field_name("body") is None:
            name = node.child_by_field_name("name")
            refs.extend([ImportRef(lang, _text(doc, name.start_byte, name.end_byte), kind="mod")] if name else [])
        elif lang == "rust" and t == "use_declaration":
            refs.extend(_rust_uses(doc, node))
        elif lang == "java" and t in ("package_declaration", "import_declaration"):
            name = next((c for c in node.named_children if c.type in ("scoped_identifier", "identifier")), None)
            dotted = re.sub(r"\s+", "", _text(doc, name.start_byte, name.end_byte)) if name else ""
            if t == "package_declaration":
                package = dotted
            elif any(c.type == "asterisk" for c in node.children):
                refs.append(ImportRef(lang, dotted + ".*", package=package))
            elif dotted:
                refs.append(ImportRef(lang, dotted, (dotted.rsplit(".", 1)[-1],), package=package))
        elif lang in JS_LANGUAGES and t == "call_expression" and (found := _js_imports(doc, node)):
            refs.extend(found)
        elif t in _IMPORT_HOLDERS or (lang in JS_LANGUAGES and t in ("arguments", "call_expression")):
            stack.extend(reversed(node.children))
    return refs


def _python_imports(doc: Document, node: Node) -> list[ImportRef]:
    def dotted(n: Node) -> str:
        n = (n.child_by_field_name("name") or n) if n.type == "aliased_import" else n
        return _text(doc, n.start_byte, n.end_byte).replace(" ", "")

    names = [dotted(n) for n in node.children_by_field_name("name")]
    if node.type == "import_statement":
        return [ImportRef("python", name) for name in names]
    module = node.child_by_field_name("module_name")
    return [ImportRef("python", dotted(module), tuple(names))] if module is not None else []


def _js_imports(doc: Document, node: Node) -> list[ImportRef]:
    if node.type == "call_expression":
        fn, args = node.child_by_field_name("function"), node.child_by_field_name("arguments")
        if fn is None or args is None or _text(doc, fn.start_byte, fn.end_byte) not in ("require", "import"):
            return []
        source = next((a for a in args.named_children if a.type == "string"), None)
        pattern = node.parent.child_by_field_name("name") if node.parent is not None else None
        holder = pattern if pattern is not None and pattern.type == "object_pattern" else None
    else:
        source, holder = node.child_by_field_name("source"), node
    if source is None:
        return []
    names: list[str] = []
    for n in _descendants(
        holder,
        {
            "import_specifier",
            "export_specifier",
            "import_clause",
            "shorthand_property_identifier_pattern",
            "pair_pattern",
        },
    ):
        target = n.child_by_field_name("name") or n.child_by_field_name("key")
        if n.type == "import_clause":  # its default import
            target = next((c for c in n.named_children if c.type == "identifier"), None)
        elif n.type == "shorthand_property_identifier_pattern":
            target = n
        if target is not None:
            names.append(_text(doc, target.start_byte, target.end_byte))
    return [ImportRef(doc.language, _text(doc, source.start_byte, source.end_byte)[1:-1], tuple(names))]


def _descendants(node: Node | None, types: set[str]) -> Iterator[Node]:
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if n.type in types:
            yield n
        stack.extend(reversed(n.named_children))


def _rust_uses(doc: Document, node: Node) -> list[ImportRef]:
    arg = node.child_by_field_name("argument")
    if arg is None:
        return []
    text = re.sub(r"\s+as\s+\w+", "", _text(doc, arg.start_byte, arg.end_byte))
    grouped: dict[str, list[str]] = {}
    for path in _expand_use(re.sub(r"\s+", "", text)):
        module, _, name = path.rpartition("::")
        grouped.setdefault(module or name, []).extend([name] if module and name != "*" else [])
    return [ImportRef("rust", module, tuple(names)) for module, names in grouped.items()]


def _expand_use(path: str) -> list[str]:
    """`a::{b, c::{d, self}}` -> a::b, a::c::d, a::c."""
    i = path.find("{")
    if i == -1 or not path.endswith("}"):
        return [path]
    prefix, depth, start = path[:i], 0, i + 1
    items: list[str] = []
    out: list[str] = []
    for j in range(i + 1, len(path) - 1):
        depth += {"{": 1, "}": -1}.get(path[j], 0)
        if path[j] == "," and depth == 0:
            items.append(path[start:j])
            start = j + 1
    items.append(path[start:-1])
    for item in filter(None, items):
        out.extend([prefix.rstrip(":")] if item == "self" else _expand_use(prefix + item))
    return out


def resolve(ref: ImportRef, current: Path, roots: Sequence[Path]) -> list[Path]:
    """The existing files `ref` names, seen from the file `current`: resolved paths inside `roots` only."""
    return resolve_all([ref], current, roots)[0]


def resolve_all(refs: Sequence[ImportRef], current: Path, roots: Sequence[Path]) -> list[list[Path]]:
    """`resolve` for each of `refs` (resolving `current` and the roots once)."""
    real_roots = sorted((os.path.realpath(r) for r in roots), key=len, reverse=True)
    here = Path(os.path.realpath(current))
    found: list[list[Path]] = []
    for ref in refs:
        finder = {"python": _python, "go": _go, "rust": _rust, "java": _java}.get(ref.language)
        if finder is None and ref.language in JS_LANGUAGES:
            finder = _js
        out: list[Path] = []
        for p in finder(ref, here, real_roots) if finder is not None else []:
            real = Path(os.path.realpath(p))
            if real != here and real not in out and root_of(str(real), real_roots) and real.is_file():
                out.append(real)
        found.append(out)
    return found


def _first(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_file()), None)


def _ancestors(directory: Path, roots: Sequence[str]) -> list[Path]:
    """`directory` and its parents, up to the root holding it (none outside the roots)."""
    root = root_of(str(directory), roots)
    out = [directory] if root is not None else []
    while out and str(out[-1]) != root and out[-1].parent != out[-1]:
        out.append(out[-1].parent)
    return out


def _python(ref: ImportRef, here: Path, roots: Sequence[str]) -> list[Path]:
    level = len(ref.module) - len(ref.module.lstrip("."))
    parts = [p for p in ref.module[level:].split(".") if p]
    if level:
        bases = [here.parents[level - 1]] if level <= len(here.parents) else []
    else:
        bases = [*_ancestors(here.parent, roots), *(Path(r) / "src" for r in roots)]
    for base in bases:
        pkg = base.joinpath(*parts)
        is_package = pkg.is_dir()  # only a package has submodules: no look-ups for `from typing import ...`
        module = _first(
            *([pkg.with_name(pkg.name + ".py")] if parts else []), *([pkg / "__init__.py"] if is_package else [])
        )
        subs = [s for n in ref.names if is_package and (s := _first(pkg / f"{n}.py", pkg / n / "__init__.py"))]
        if module is not None or subs:
            return ([module] if module is not None and len(subs) < max(1, len(ref.names)) else []) + subs
    return []


def _js(ref: ImportRef, here: Path, roots: Sequence[str]) -> list[Path]:
    if not ref.module.startswith("."):
        return []  # packages (node_modules) and aliases are not followed
    base = here.parent / ref.module
    stem, suffix = str(base), base.suffix
    candidates = [base] if suffix else []
    if suffix in (".js", ".jsx", ".mjs", ".cjs"):  # TypeScript sources imported by their output's name
        candidates += [Path(stem[: -len(suffix)] + ext) for ext in (".ts", ".tsx", ".mts", ".cts")]
    candidates += [Path(stem + ext) for ext in _JS_EXTS] + [base / f"index{ext}" for ext in _JS_EXTS]
    found = _first(*candidates)
    return [found] if found is not None else []


@lru_cache(maxsize=64)
def _go_module(go_mod: str, mtime_ns: int) -> str:
    with open(go_mod, "rb") as f:
        m = re.search(rb"^\s*module\s+\"?([^\s\"]+)", f.read(65536), re.MULTILINE)
    return m.group(1).decode() if m else ""


def _go(ref: ImportRef, here: Path, roots: Sequence[str]) -> list[Path]:
    for d in _ancestors(here.parent, roots):
        go_mod = d / "go.mod"
        if go_mod.is_file():  # the nearest go.mod decides
            module = _go_module(str(go_mod), go_mod.stat().st_mtime_ns)
            if not module or (ref.module != module and not ref.module.startswith(module + "/")):
                return []
            pkg = d / ref.module[len(module) :].lstrip("/")
            return sorted(p for p in pkg.glob("*.go") if not p.name.endswith("_test.go"))
    return []


def _rust(ref: ImportRef, here: Path, roots: Sequence[str]) -> list[Path]:
    own = here.parent if here.stem in ("mod", "lib", "main") else here.parent / here.stem  # child modules' dir
    if ref.kind == "mod":
        found = _first(
            own / f"{ref.module}.rs",
            own / ref.module / "mod.rs",
            here.parent / f"{ref.module}.rs",
            here.parent / ref.module / "mod.rs",
        )
        return [found] if found is not None else []
    segs = ref.module.split("::")
    base, base_file = own, None  # a bare first segment: a child module (2018 uniform paths)
    if segs[0] == "crate":
        cargo = next((d for d in _ancestors(here.parent, roots) if (d / "Cargo.toml").is_file()), None)
        if cargo is None:
            return []
        base, segs = cargo / "src", segs[1:]
        base_file = _first(base / "lib.rs", base / "main.rs")
    elif segs[0] == "self":
        base, base_file, segs = own, here, segs[1:]
    elif segs[0] == "super":
        base, segs = own.parent, segs[1:]
        while segs and segs[0] == "super":
            base, segs = base.parent, segs[1:]
        base_file = _first(base / "mod.rs", base.with_name(base.name + ".rs"), base / "lib.rs", base / "main.rs")
    out: list[Path] = []
    for tail in [[*segs, n] for n in ref.names] or [segs]:
        found = next(
            (
                f
                for k in range(len(tail), 0, -1)
                if (f := _first(base.joinpath(*tail[: k - 1], tail[k - 1] + ".rs"), base.joinpath(*tail[:k], "mod.rs")))
            ),
            base_file,
        )
        out.extend([found] if found is not None else [])
    return out


def _java(ref: ImportRef, here: Path, roots: Sequence[str]) -> list[Path]:
    dirs = _ancestors(here.parent, roots)
    pkg = ref.package.split(".") if ref.package else []
    matched = len(dirs) > len(pkg) and [d.name for d in dirs[: len(pkg)]] == pkg[::-1]
    segs = ref.module.split(".")
    wildcard = segs[-1] == "*"
    segs = segs[:-1] if wildcard else segs
    for root in [dirs[len(pkg)]] if matched else dirs:  # else: any ancestor may be the source root
        found = sorted(root.joinpath(*segs).glob("*.java")) if wildcard else []
        for k in range(len(segs), 1, -1):  # a class, or the class of a static member / nested class
            if not found and (f := root.joinpath(*segs[: k - 1], segs[k - 1] + ".java")).is_file():
                found = [f]
        if found:
            return found
    return []
