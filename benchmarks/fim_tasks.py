"""FIM task sets for `fim_eval.py`: pure, deterministic builders of masked spans and cursor placements.

A `Source` is one complete file with one masked span (whole lines). `place` turns it into a `Task`: the
document an editor would show, the cursor, and the text that, inserted at the cursor, gives the file back
(asserted for every task). Placements of the cursor:
- `col0`: the masked lines removed, the cursor at column 0 of the line that followed them (the shared
  HumanEval infilling layout);
- `indent`: the masked lines replaced by their first line's indentation and a newline, the cursor after
  the indentation (what an editor shows after Enter);
- `eol`: the masked lines removed, the cursor at the end of the line before them, before its newline: the
  answer must start with a newline (or, where that line is blank, may fill it). Not built for a span that
  starts the file.
- `api` (cross-file sets only, CrossCodeEval's split): the masked line cut just after the name from another
  file and the `.`, `(`, `::` or `{` that follows it (`style = Style.|`); the rest of the line is the answer,
  which the other file's definitions decide more than the author's intent does.

Sets (every choice is a sort or a sha256 of the task id; no randomness), with their sizes on the shared data:
- `humaneval-single`, `humaneval-multi`: `../shared/eval/humaneval-infilling` as published (1,033 / 5,815).
- `pack-line`, `pack-block`: HumanEvalPack (python, js, java, go, cpp, rust). The document is the task's
  prompt + canonical solution (Go: `package main` first; the others' prompt + solution is already a whole
  file); one solution line with >= 4 non-blank characters, not only brackets, chosen by a hash of the task
  id (`pack-line`), or one statement of 2-8 lines inside a body, preferring loops and conditionals, found
  with tree-sitter (`pack-block`). 164 line tasks per language; blocks: python 105, js 127, java 137,
  go 149, cpp 142, rust 129 (the other solutions have no such statement).
- `crossfile-rich`: in each module of `../shared/workspaces/rich` (not the generated `_unicode_data` tables),
  for each name imported from another module of the package, the first line that calls it or reads an
  attribute of it (345 lines in 62 modules; 245 have an `api` cut: something other than brackets follows it).
- `crossfile-corpus`: in each file of `../shared/corpus`, for each name defined at the top level of another
  corpus file of the same repository (and not in this file), the first line that calls it or reads a member
  of it (Go: also `pkg.Name` of another corpus package): 325 lines in 57 files (go 101, rust 87, python 78,
  typescript 59; 288 with an `api` cut). Files are laid out at their repository paths under a root given by the caller
  (`layout_corpus` copies them there).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkls.text.syntax import parse
from tree_sitter import Node

SHARED = Path(__file__).resolve().parents[2] / "shared"
INFILLING = SHARED / "eval" / "humaneval-infilling"
PACK = SHARED / "eval" / "humanevalpack"
RICH = SHARED / "workspaces" / "rich"
CORPUS = SHARED / "corpus"

SETS = ("humaneval-single", "humaneval-multi", "pack-line", "pack-block", "crossfile-rich", "crossfile-corpus")
PLACEMENTS = ("col0", "indent", "eol", "api")
PACK_LANGUAGES = ("python", "js", "java", "go", "cpp", "rust")
LSP_LANGUAGE = {
    "python": "python",
    "js": "javascript",
    "java": "java",
    "go": "go",
    "cpp": "cpp",
    "rust": "rust",
    "typescript": "typescript",
}
EXTENSION = {"python": "py", "js": "js", "java": "java", "go": "go", "cpp": "cpp", "rust": "rs"}
# The statements that hold a body's statements, per tree-sitter grammar.
BODIES = frozenset({"block", "statement_block", "statement_list", "compound_statement"})
COMPOUND = re.compile(r"for|while|if|loop|switch|match|try|with|do_")
# HumanEvalPack's C++ harness puts these before every program (bigcode-evaluation-harness, humanevalpack.py).
CPP_HEADERS = "".join(
    f"#include<{h}>\n"
    for h in (
        "stdlib.h",
        "algorithm",
        "math.h",
        "stdio.h",
        "vector",
        "string",
        "climits",
        "cstring",
        "iostream",
        "cassert",
    )
)


@dataclass(frozen=True)
class Source:
    """A complete file `text` with the whole lines `text[start:end]` masked."""

    set: str
    task_id: str
    language: str  # pack key (python, js, java, go, cpp, rust) or corpus language
    path: str  # relative path: the document's file name, under `root` when there is one
    text: str
    start: int
    end: int
    root: str | None = None  # workspace root the server is told about (cross-file sets)
    runner: str | None = None  # how tests run: python, node, java, cpp, rust, go; None: no tests
    test_prefix: str = ""  # program = test_prefix + completed document + test_suffix
    test_suffix: str = ""
    split: int | None = None  # where the `api` placement cuts the masked line (characters into it)

    @property
    def kind(self) -> str:
        return "block" if self.set in ("humaneval-multi", "pack-block") else "line"

    @property
    def middle(self) -> str:
        return self.text[self.start : self.end]

    @property
    def lsp_language(self) -> str:
        return LSP_LANGUAGE[self.language]


@dataclass(frozen=True)
class Task:
    """What the editor shows (`doc`, `cursor`) and the text that restores the file (`expected`)."""

    source: Source
    placement: str
    doc: str
    cursor: int
    expected: str

    @property
    def key(self) -> str:
        return f"{self.source.set}|{self.source.task_id}|{self.placement}"


def place(src: Source, placement: str) -> Task:
    """The document and cursor of one placement; asserts the expected answer restores the file."""
    prefix, middle, suffix = src.text[: src.start], src.middle, src.text[src.end :]
    assert middle.endswith("\n") and (not prefix or prefix.endswith("\n")), src.task_id
    if placement == "col0":
        task = Task(src, placement, prefix + suffix, len(prefix), middle)
    elif placement == "indent":
        indent = middle[: len(middle) - len(middle.lstrip(" \t"))]
        task = Task(
            src, placement, prefix + indent + "\n" + suffix, len(prefix) + len(indent), middle[len(indent) : -1]
        )
    elif placement == "eol":
        assert prefix, f"{src.task_id}: no line before the masked span"
        task = Task(src, placement, prefix + suffix, len(prefix) - 1, "\n" + middle[:-1])
    elif placement == "api":
        assert src.split is not None and 0 < src.split < len(middle) - 1, src.task_id
        task = Task(
            src,
            placement,
            prefix + middle[: src.split] + "\n" + suffix,
            len(prefix) + src.split,
            middle[src.split : -1],
        )
    else:
        raise ValueError(f"unknown placement {placement!r}")
    assert task.doc[: task.cursor] + task.expected + task.doc[task.cursor :] == src.text, (src.task_id, placement)
    return task


def every_kth(rows: list[Any], limit: int | None, heldout: bool = False) -> list[Any]:
    """`limit` rows spread evenly over `rows` (all of them without a limit). `heldout`: the rows half-way
    between those, none of them the same: a slice to choose settings on without choosing them on the
    reported tasks."""
    if not limit or (limit >= len(rows) and not heldout):
        return rows
    step = len(rows) / limit
    if heldout and step < 2:
        raise ValueError(f"no held-out slice of {limit} beside {limit} of {len(rows)} rows")
    shift = step / 2 if heldout else 0.0
    return [rows[int(i * step + shift)] for i in range(limit)]


def pick(task_id: str, salt: str, n: int) -> int:
    """A deterministic index in range(n) from the task id."""
    return int(hashlib.sha256(f"{task_id}|{salt}".encode()).hexdigest(), 16) % n


def lines_of(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of every line that ends with a newline, the newline included."""
    out, pos = [], 0
    while (nl := text.find("\n", pos)) != -1:
        out.append((pos, nl + 1))
        pos = nl + 1
    return out


def maskable(line: str) -> bool:
    """A line worth masking: >= 4 non-blank characters, not only brackets and punctuation."""
    return sum(not c.isspace() for c in line) >= 4 and re.search(r"[A-Za-z0-9_]", line) is not None


# ---- HumanEval infilling ---------------------------------------------------------------------------------------


def humaneval(which: str, limit: int | None, heldout: bool = False) -> list[Source]:
    name = {"humaneval-single": "HumanEval-SingleLineInfilling", "humaneval-multi": "HumanEval-MultiLineInfilling"}
    with gzip.open(INFILLING / f"{name[which]}.jsonl.gz", "rt") as f:
        rows = every_kth([json.loads(line) for line in f], limit, heldout)
    out = []
    for i, r in enumerate(rows):
        start = len(r["prompt"])
        out.append(
            Source(
                which,
                r["task_id"],
                "python",
                f"humaneval/{i}/task.py",
                r["prompt"] + r["canonical_solution"] + r["suffix"],
                start,
                start + len(r["canonical_solution"]),
                runner="python",
                test_suffix=f"\n\n{r['test']}\n\ncheck({r['entry_point']})\n",
            )
        )
    return out


# ---- HumanEvalPack ---------------------------------------------------------------------------------------------


def pack_rows(language: str) -> list[dict[str, Any]]:
    with (PACK / f"humanevalpack_{language}.jsonl").open() as f:
        return [json.loads(line) for line in f]


def pack_document(language: str, row: dict[str, Any]) -> tuple[str, int]:
    """The whole file of a HumanEvalPack task and where its solution starts. The prompt ends inside the
    function in every language but Python; the canonical solution closes it (and Java's class)."""
    head = "package main\n\n" if language == "go" else ""
    text = head + row["prompt"] + row["canonical_solution"]
    return (text if text.endswith("\n") else text + "\n"), len(head) + len(row["prompt"])


def pack_tests(language: str, row: dict[str, Any]) -> dict[str, Any]:
    """How a completed document is tested, as the HumanEvalPack harness composes programs."""
    if language == "python":
        return {"runner": "python", "test_suffix": "\n\n" + row["test"]}
    if language == "js":
        return {"runner": "node", "test_suffix": "\n" + row["test"]}
    if language == "java":
        return {"runner": "java", "test_suffix": "\n" + row["test"]}
    if language == "cpp":
        return {"runner": "cpp", "test_prefix": CPP_HEADERS, "test_suffix": "\n" + row["test"]}
    if language == "rust":
        return {"runner": "rust", "test_suffix": "\n" + row["test"]}
    # Go: the test setup (package clause, testing and testify imports) replaces the document's package clause.
    return {"runner": "go", "test_prefix": row["test_setup"], "test_suffix": "\n" + row["test"]}


def pack_line(language: str, row: dict[str, Any]) -> Source | None:
    text, solution = pack_document(language, row)
    spans = [(a, b) for a, b in lines_of(text) if a >= solution and maskable(text[a:b])]
    if not spans:
        return None
    a, b = spans[pick(row["task_id"], "line", len(spans))]
    return Source(
        "pack-line",
        row["task_id"],
        language,
        f"{row['task_id'].replace('/', '_')}.{EXTENSION[language]}",
        text,
        a,
        b,
        **pack_tests(language, row),
    )


def statements(node: Node) -> Iterator[Node]:
    """Every named, non-comment statement directly inside a body, at any depth."""
    for child in node.named_children:
        if node.type in BODIES and "comment" not in child.type:
            yield child
        yield from statements(child)


def whole_lines(text: str, a: int, b: int) -> tuple[int, int] | None:
    """The line span of text[a:b] when nothing but whitespace shares its first and last lines."""
    line_start = text.rfind("\n", 0, a) + 1
    nl = text.find("\n", b)
    if nl == -1 or text[line_start:a].strip() or text[b:nl].strip():
        return None
    return line_start, nl + 1


def block_spans(language: str, text: str, lo: int) -> list[tuple[int, int, bool]]:
    """(start, end, compound) of statements of 2-8 lines that are whole lines, at or after offset `lo`."""
    source = text.encode()
    tree = parse(LSP_LANGUAGE[language], source)
    if tree is None:
        return []
    out = []
    for node in statements(tree.root_node):
        a, b = (len(source[:x].decode()) for x in (node.start_byte, node.end_byte))
        span = whole_lines(text, a, b)
        if span is None or span[0] < lo:
            continue
        body = text[span[0] : span[1]]
        n = sum(1 for line in body.split("\n") if line.strip())
        if 2 <= body.count("\n") <= 8 and n >= 2:
            inner = node.named_children[0].type if node.type == "expression_statement" and node.named_children else ""
            out.append((span[0], span[1], bool(COMPOUND.search(node.type) or COMPOUND.search(inner))))
    return sorted(set(out))


def pack_block(language: str, row: dict[str, Any]) -> Source | None:
    text, solution = pack_document(language, row)
    spans = block_spans(language, text, solution)
    spans = [s for s in spans if s[2]] or spans
    if not spans:
        return None
    a, b, _ = spans[pick(row["task_id"], "block", len(spans))]
    return Source(
        "pack-block",
        row["task_id"],
        language,
        f"{row['task_id'].replace('/', '_')}.{EXTENSION[language]}",
        text,
        a,
        b,
        **pack_tests(language, row),
    )


def pack(
    which: str,
    limit: int | None,
    languages: tuple[str, ...] = PACK_LANGUAGES,
    heldout: bool = False,
) -> list[Source]:
    """`limit` tasks per language (every k-th of those with a maskable span)."""
    build = pack_line if which == "pack-line" else pack_block
    out: list[Source] = []
    for language in languages:
        found = [s for s in (build(language, row) for row in pack_rows(language)) if s is not None]
        out.extend(every_kth(found, limit, heldout))
    return out


# ---- cross-file ------------------------------------------------------------------------------------------------

_EXCLUDED_ANCESTORS = frozenset(
    {
        "import_statement",
        "import_from_statement",
        "future_import_statement",
        "import_declaration",
        "use_declaration",
        "package_clause",
    }
)
_USE_FOLLOWERS = (b"(", b".", b"::", b"{")


def _node_text(source: bytes, node: Node) -> str:
    return source[node.start_byte : node.end_byte].decode()


def _inside(node: Node, kinds: frozenset[str]) -> bool:
    n: Node | None = node.parent
    while n is not None:
        if n.type in kinds:
            return True
        n = n.parent
    return False


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for c in node.children:
        yield from _walk(c)


def _column(source: bytes, at: int) -> int:
    """Characters from the start of the line to byte offset `at`."""
    return len(source[source.rfind(b"\n", 0, at) + 1 : at].decode())


def usage_lines(text: str, language: str, names: dict[str, str], kinds: frozenset[str]) -> dict[str, tuple[int, int]]:
    """For each name, the first line (0-based) where an identifier node of `kinds` with that text is
    called, dotted into or built (followed by `(`, `.`, `::` or `{`), outside imports; only maskable lines
    that end with a newline. With the row, the column just after that follower (the `api` cut). `names`
    maps a name to the file that defines it."""
    source = text.encode()
    tree = parse(LSP_LANGUAGE[language], source)
    if tree is None:
        return {}
    lines = text.split("\n")
    first: dict[str, tuple[int, int]] = {}
    for node in _walk(tree.root_node):
        if node.type not in kinds or not node.is_named:
            continue
        name = _node_text(source, node)
        if name not in names or name in first:
            continue
        follower = next((f for f in _USE_FOLLOWERS if source.startswith(f, node.end_byte)), None)
        if follower is None or _inside(node, _EXCLUDED_ANCESTORS):
            continue
        row = node.start_point[0]
        if row + 1 < len(lines) and maskable(lines[row]) and len(lines[row]) <= 160:
            first[name] = (row, _column(source, node.end_byte + len(follower)))
    return first


def _sources(
    set_name: str, task_prefix: str, language: str, path: str, text: str, root: Path, used: dict[str, tuple[int, int]]
) -> list[Source]:
    """One source per line in `used`, its `api` cut at the first cross-file use on that line."""
    spans = lines_of(text)
    cuts: dict[int, int] = {}
    for row, col in used.values():
        cuts[row] = min(col, cuts.get(row, col))
    out = []
    for row in sorted(cuts):
        a, b = spans[row]
        rest = text[a + cuts[row] : b]  # no `api` cut where nothing but brackets follows (`Foo(` + newline)
        split = cuts[row] if re.search(r"[A-Za-z0-9_]", rest) else None
        out.append(
            Source(set_name, f"{task_prefix}{path}:{row + 1}", language, path, text, a, b, root=str(root), split=split)
        )
    return out


def _python_imports(text: str) -> dict[str, str]:
    """Names bound by `from .x import a, b as c` / `from . import m` / `from rich.x import ...` -> module."""
    source = text.encode()
    tree = parse("python", source)
    out: dict[str, str] = {}
    if tree is None:
        return out
    for node in _walk(tree.root_node):
        if node.type != "import_from_statement":
            continue
        module = node.child_by_field_name("module_name")
        mod = _node_text(source, module) if module is not None else ""
        if not (mod.startswith(".") or mod == "rich" or mod.startswith("rich.")):
            continue
        for child in node.children_by_field_name("name"):
            bound = child.child_by_field_name("alias") if child.type == "aliased_import" else child
            if bound is not None:
                out[_node_text(source, bound).split(".")[-1]] = mod
    return out


def _python_local_definitions(text: str) -> set[str]:
    tree = parse("python", text.encode())
    names: set[str] = set()
    if tree is None:
        return names
    for node in tree.root_node.named_children:
        inner = node.child_by_field_name("definition") if node.type == "decorated_definition" else node
        if inner is not None and inner.type in ("function_definition", "class_definition"):
            name = inner.child_by_field_name("name")
            if name is not None:
                names.add(_node_text(text.encode(), name))
    return names


def crossfile_rich(limit: int | None, root: Path = RICH, heldout: bool = False) -> list[Source]:
    out: list[Source] = []
    for path in sorted(root.rglob("*.py")):
        if "_unicode_data" in path.parts:  # generated width tables, not code
            continue
        text = path.read_text()
        rel = path.relative_to(root).as_posix()
        local = _python_local_definitions(text)
        imported = {n: m for n, m in _python_imports(text).items() if n not in local}
        used = usage_lines(text, "python", imported, frozenset({"identifier"}))
        out.extend(_sources("crossfile-rich", "", "python", rel, text, root, used))
    return every_kth(out, limit, heldout)


# Top-level definitions per corpus language: node type -> how to find the names.
_DEFINITION_TYPES = {
    "python": ("function_definition", "class_definition", "decorated_definition"),
    "typescript": (
        "function_declaration",
        "class_declaration",
        "abstract_class_declaration",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "lexical_declaration",
        "variable_declaration",
        "internal_module",
        "module",
        "function_signature",
    ),
    "go": ("function_declaration", "type_declaration", "const_declaration", "var_declaration"),
    "rust": (
        "function_item",
        "struct_item",
        "enum_item",
        "trait_item",
        "type_item",
        "const_item",
        "static_item",
        "union_item",
    ),
}
_USAGE_KINDS = {
    "python": frozenset({"identifier"}),
    "typescript": frozenset({"identifier", "type_identifier"}),
    "go": frozenset({"identifier", "type_identifier"}),
    "rust": frozenset({"identifier", "type_identifier"}),
}
_DECLARATORS = ("variable_declarator", "type_spec", "type_alias", "const_spec", "var_spec")


def top_level_names(text: str, language: str) -> set[str]:
    """Names defined at the top level of a file (TypeScript: also inside `export`)."""
    source = text.encode()
    tree = parse(LSP_LANGUAGE[language], source)
    names: set[str] = set()
    if tree is None:
        return names
    nodes = list(tree.root_node.named_children)
    nodes += [
        c
        for n in nodes
        if n.type in ("export_statement", "ambient_declaration", "expression_statement")
        for c in n.named_children
    ]
    for node in nodes:
        if node.type not in _DEFINITION_TYPES[language]:
            continue
        if node.type == "decorated_definition":
            node = node.child_by_field_name("definition") or node
        for n in [node] + [c for c in node.named_children if c.type in _DECLARATORS]:
            name = n.child_by_field_name("name")
            if name is None:
                continue
            parts = name.named_children if name.type == "expression_list" else [name]  # Go: const a, b = ...
            names.update(
                _node_text(source, i) for i in parts if i.type in ("identifier", "type_identifier", "field_identifier")
            )
    return {n for n in names if len(n) >= 4}


def corpus_manifest(corpus: Path = CORPUS) -> list[dict[str, Any]]:
    with (corpus / "MANIFEST.jsonl").open() as f:
        return [json.loads(line) for line in f]


def repo_dir(repo: str) -> str:
    return repo.split("/")[-1]


def _go_qualified_uses(text: str, packages: dict[str, dict[str, str]], own: str) -> dict[str, tuple[int, int]]:
    """Go `pkg.Name` (a call, type or value) where `pkg` is another corpus package defining `Name`; the `api`
    cut is after `pkg.`."""
    source = text.encode()
    tree = parse("go", source)
    first: dict[str, tuple[int, int]] = {}
    if tree is None:
        return first
    lines = text.split("\n")
    for node in _walk(tree.root_node):
        if node.type == "selector_expression":
            operand, field = node.child_by_field_name("operand"), node.child_by_field_name("field")
        elif node.type == "qualified_type":
            operand, field = node.child_by_field_name("package"), node.child_by_field_name("name")
        else:
            continue
        if operand is None or field is None:
            continue
        pkg, name = _node_text(source, operand), _node_text(source, field)
        if pkg == own or name not in packages.get(pkg, {}):
            continue
        key, row = f"{pkg}.{name}", node.start_point[0]
        if key not in first and row + 1 < len(lines) and maskable(lines[row]) and len(lines[row]) <= 160:
            first[key] = (row, _column(source, field.start_byte))
    return first


def crossfile_corpus(
    limit: int | None,
    layout_root: Path,
    corpus: Path = CORPUS,
    heldout: bool = False,
) -> list[Source]:
    """Tasks over the corpus files laid out at `layout_root/<repo>/<path>` (see `layout_corpus`)."""
    rows = corpus_manifest(corpus)
    texts = {r["path"]: (corpus / r["file"]).read_text() for r in rows}
    out: list[Source] = []
    for repo in sorted({r["repo"] for r in rows}):
        files = sorted((r for r in rows if r["repo"] == repo), key=lambda r: r["path"])
        defined = {r["path"]: top_level_names(texts[r["path"]], r["lang"]) for r in files}
        packages: dict[str, dict[str, str]] = {}  # Go: package dir name -> name -> file
        for r in files:
            pkg = Path(r["path"]).parent.name
            for n in defined[r["path"]]:
                packages.setdefault(pkg, {}).setdefault(n, r["path"])
        for r in files:
            path, lang, text = r["path"], r["lang"], texts[r["path"]]
            # Go sees other files' names unqualified only inside its own package (directory).
            peers = [
                o["path"]
                for o in files
                if o["path"] != path and (lang != "go" or Path(o["path"]).parent == Path(path).parent)
            ]
            others = {n: p for p in peers for n in defined[p] if n not in defined[path]}
            used = usage_lines(text, lang, others, _USAGE_KINDS[lang])
            if lang == "go":
                used |= _go_qualified_uses(text, packages, Path(path).parent.name)
            out.extend(
                _sources("crossfile-corpus", f"{repo_dir(repo)}/", lang, path, text, layout_root / repo_dir(repo), used)
            )
    return every_kth(out, limit, heldout)


def layout_corpus(dest: Path, corpus: Path = CORPUS) -> Path:
    """Copy the corpus files to `dest/<repo>/<path>` (their places in their repositories); returns `dest`."""
    for r in corpus_manifest(corpus):
        target = dest / repo_dir(r["repo"]) / r["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(corpus / r["file"], target)
    return dest


def build(which: str, limit: int | None, corpus_root: Path | None = None, heldout: bool = False) -> list[Source]:
    """The sources of one set; `corpus_root` is where `crossfile-corpus` files are (to be) laid out; `heldout`:
    the tasks between the ones `limit` picks (`every_kth`)."""
    if which in ("humaneval-single", "humaneval-multi"):
        return humaneval(which, limit, heldout)
    if which in ("pack-line", "pack-block"):
        return pack(which, limit, heldout=heldout)
    if which == "crossfile-rich":
        return crossfile_rich(limit, heldout=heldout)
    if which == "crossfile-corpus":
        if corpus_root is None:
            raise ValueError("crossfile-corpus needs the directory its files are laid out in")
        return crossfile_corpus(limit, corpus_root, heldout=heldout)
    raise ValueError(f"unknown set {which!r}; known: {', '.join(SETS)}")


def tasks(sources: list[Source], placements: tuple[str, ...]) -> list[Task]:
    """Every source at every placement it has (`eol` needs a line before the span, `api` a cut)."""
    return [
        place(s, p)
        for s in sources
        for p in placements
        if (p != "eol" or s.start > 0) and (p != "api" or s.split is not None)
    ]
