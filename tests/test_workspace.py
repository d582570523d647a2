"""Workspace context: imports resolved per language, files read safely, snippets chosen within a budget."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sparkls.text.document import Document
from sparkls.workspace.files import DEFAULT_EXCLUDES, WorkspaceIndex, excluded, refused
from sparkls.workspace.imports import ImportRef, imports, resolve
from sparkls.workspace.snippets import Snippet, gather

from tests.conftest import doc_at


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def opened(path: Path, text: str | None = None) -> Document:
    return Document.open(path.as_uri(), None, 1, path.read_text() if text is None else text)


def resolved(tmp_path: Path, current: str) -> dict[str, list[str]]:
    """Each import of `current` -> the files it resolves to, relative to the workspace."""
    doc = opened(tmp_path / current)
    index = WorkspaceIndex([tmp_path])
    return {r.module: [index.relative(p) for p in resolve(r, tmp_path / current, [tmp_path])] for r in imports(doc)}


# ---- imports, per language ----------------------------------------------------------------------------------

def test_python_imports_carry_their_names_and_resolve_relative_absolute_and_submodule_forms(tmp_path):
    write(tmp_path, {
        "pkg/__init__.py": "", "pkg/mod.py": "Z = 1\n", "pkg/sub/__init__.py": "", "pkg/sub/x.py": "def y(): ...\n",
        "pkg/sub/helpers.py": "", "a/b.py": "",
        "pkg/sub/main.py": "import a.b\nimport os\nfrom .x import y, w as v\nfrom ..mod import Z\n"
                           "from pkg import mod\nfrom . import helpers\n",
    })
    refs = imports(opened(tmp_path / "pkg/sub/main.py"))
    assert [(r.module, r.names) for r in refs] == [
        ("a.b", ()), ("os", ()), (".x", ("y", "w")), ("..mod", ("Z",)), ("pkg", ("mod",)), (".", ("helpers",))]
    assert resolved(tmp_path, "pkg/sub/main.py") == {
        "a.b": ["a/b.py"], "os": [], ".x": ["pkg/sub/x.py"], "..mod": ["pkg/mod.py"], "pkg": ["pkg/mod.py"],
        ".": ["pkg/sub/helpers.py"]}


def test_typescript_imports_exports_and_requires_resolve_relative_specifiers_only(tmp_path):
    write(tmp_path, {
        "src/m.ts": "export const a = 1;\n", "lib/util/index.ts": "", "src/r.js": "", "src/out.ts": "",
        "src/app.ts": 'import D, {a, b as c} from "./m";\nimport * as ns from "lodash";\n'
                      'export {x as y} from "../lib/util";\nconst {p, q: r} = require("./r");\n'
                      'import {o} from "./out.js";\nimport "./missing";\nconst lazy = await import("./lazy");\n',
        "src/lazy.tsx": "",
    })
    refs = imports(opened(tmp_path / "src/app.ts"))
    assert [(r.module, r.names) for r in refs] == [
        ("./m", ("D", "a", "b")), ("lodash", ()), ("../lib/util", ("x",)), ("./r", ("p", "q")), ("./out.js", ("o",)),
        ("./missing", ()), ("./lazy", ())]
    assert resolved(tmp_path, "src/app.ts") == {
        "./m": ["src/m.ts"], "lodash": [], "../lib/util": ["lib/util/index.ts"], "./r": ["src/r.js"],
        "./out.js": ["src/out.ts"], "./missing": [], "./lazy": ["src/lazy.tsx"]}


def test_go_imports_resolve_through_the_nearest_go_mod_to_the_package_files_without_tests(tmp_path):
    write(tmp_path, {
        "go.mod": "module example.com/proj\n\ngo 1.22\n",
        "pkg/store/a.go": "package store\n", "pkg/store/b.go": "package store\n", "pkg/store/a_test.go": "",
        "cmd/main.go": 'package main\n\nimport (\n\t"fmt"\n\ts "example.com/proj/pkg/store"\n)\n',
    })
    assert resolved(tmp_path, "cmd/main.go") == {"fmt": [], "example.com/proj/pkg/store": [
        "pkg/store/a.go", "pkg/store/b.go"]}


def test_rust_mod_and_use_declarations_resolve_from_the_crate_root_self_and_super(tmp_path):
    write(tmp_path, {
        "Cargo.toml": "[package]\nname = \"demo\"\n", "src/lib.rs": "mod net;\nmod util;\n",
        "src/util/mod.rs": "pub struct Helper;\n", "src/config.rs": "pub struct Config;\n",
        "src/net/tcp.rs": "pub struct Conn;\n",
        "src/net.rs": "mod tcp;\nuse crate::util::Helper;\nuse super::config::{Config, self};\n"
                      "use self::tcp::Conn;\nuse std::fmt;\n",
    })
    assert resolved(tmp_path, "src/lib.rs") == {"net": ["src/net.rs"], "util": ["src/util/mod.rs"]}
    refs = imports(opened(tmp_path / "src/net.rs"))
    assert ImportRef("rust", "crate::util", ("Helper",)) in refs
    assert ImportRef("rust", "super::config", ("Config",)) in refs
    assert resolved(tmp_path, "src/net.rs") == {
        "tcp": ["src/net/tcp.rs"], "crate::util": ["src/util/mod.rs"], "super::config": ["src/config.rs"],
        "super": ["src/config.rs"], "self::tcp": ["src/net/tcp.rs"], "std": []}


def test_java_imports_resolve_under_the_source_root_found_from_the_package(tmp_path):
    base = "src/main/java/com/acme/"
    write(tmp_path, {
        base + "model/User.java": "package com.acme.model;\npublic class User {}\n",
        base + "util/Strings.java": "", base + "util/Maps.java": "",
        base + "app/Main.java": "package com.acme.app;\n\nimport com.acme.model.User;\nimport com.acme.util.*;\n"
                                "import static com.acme.util.Strings.join;\nimport static com.acme.model.User.*;\n"
                                "import java.util.List;\n",
    })
    refs = imports(opened(tmp_path / base / "app/Main.java"))
    assert refs[0] == ImportRef("java", "com.acme.model.User", ("User",), package="com.acme.app")
    assert resolved(tmp_path, base + "app/Main.java") == {
        "com.acme.model.User": [base + "model/User.java"],
        "com.acme.util.*": [base + "util/Maps.java", base + "util/Strings.java"],
        "com.acme.util.Strings.join": [base + "util/Strings.java"], "com.acme.model.User.*": [base + "model/User.java"],
        "java.util.List": []}


def test_imports_inside_functions_are_left_out_but_conditional_ones_are_kept():
    doc, _ = doc_at("if TYPE_CHECKING:\n    from .a import A\n\ndef f():\n    from .b import B\n<|>")
    assert [r.module for r in imports(doc)] == [".a"]


# ---- safety -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", [".env", ".env.local", "config/secrets.json", "keys/id_rsa", "a/.git/config",
                                  "server.pem", "deploy/prod.key", "node_modules/x/index.js", "home/.ssh/config",
                                  "certs/client.p12", "CREDENTIALS.json"])
def test_secret_and_vendored_paths_are_excluded(path):
    assert excluded(path, DEFAULT_EXCLUDES)


@pytest.mark.parametrize("path", ["envelope.py", "keys.py", "src/environment.ts", "docs/git.md", "key_value.go"])
def test_ordinary_source_paths_are_not_excluded(path):
    assert not excluded(path, DEFAULT_EXCLUDES)


def test_a_glob_with_a_slash_matches_the_whole_relative_path_only():
    assert excluded("config/local.yaml", ["config/*.yaml"])
    assert not excluded("app/config/local.yaml", ["config/*.yaml"])


@pytest.mark.parametrize(("path", "glob"), [
    ("config/local.yaml", "**/config/*.yaml"), ("app/config/local.yaml", "**/config/*.yaml"),
    (".env.prod", "**/.env.*"), ("src/gen.py", "src/**/gen.py"), ("src/a/b/gen.py", "src/**/gen.py"),
    ("node_modules/x/index.js", "**/node_modules/"),
])
def test_a_double_star_folder_also_matches_no_folder_as_in_gitignore(path, glob):
    assert excluded(path, [glob])


def test_a_symlink_leading_out_of_the_root_is_refused(tmp_path):
    outside, root = tmp_path / "outside", tmp_path / "root"
    write(tmp_path, {"outside/secret.py": "TOKEN = 1\n", "root/ok.py": "x = 1\n"})
    os.symlink(outside / "secret.py", root / "link.py")
    index = WorkspaceIndex([root])
    assert index.read(root / "ok.py") == "x = 1\n"
    assert index.read(root / "link.py") is None
    assert index.read(root / ".." / "outside" / "secret.py") is None


def test_binary_oversize_and_excluded_files_are_refused(tmp_path):
    (tmp_path / "blob.py").write_bytes(b"x = 1\n\x00\x01")
    (tmp_path / "big.py").write_text("x = 1\n" * 100)
    write(tmp_path, {".env": "KEY=1\n", "small.py": "y = 2\n"})
    index = WorkspaceIndex([tmp_path], max_file_bytes=200)
    assert [index.read(tmp_path / n) for n in ("blob.py", "big.py", ".env", "missing.py", "small.py")] == [
        None, None, None, None, "y = 2\n"]


def test_a_changed_file_is_read_again(tmp_path):
    write(tmp_path, {"a.py": "x = 1\n"})
    index = WorkspaceIndex([tmp_path])
    assert index.read(tmp_path / "a.py") == "x = 1\n"
    (tmp_path / "a.py").write_text("x = 22\n")
    assert index.read(tmp_path / "a.py") == "x = 22\n"


def test_an_excluded_current_document_is_refused_inside_and_outside_the_roots(tmp_path):
    index = WorkspaceIndex([tmp_path / "ws"])
    assert refused((tmp_path / "ws" / ".env.local").as_uri(), index)
    assert refused((tmp_path / "elsewhere" / "config" / "secrets.json").as_uri(), index)
    assert not refused((tmp_path / "ws" / "main.py").as_uri(), index)


# ---- gather -------------------------------------------------------------------------------------------------

MAIN = "from .shapes import area, Box\n\ndef report(b):\n    return area(b)<|>\n"
SHAPES = ("def area(b):\n    return b.w * b.h\n\n\ndef unused():\n    return 0\n\n\nclass Box:\n"
          "    def __init__(self, w, h):\n        self.w = w\n        self.h = h\n"
          + "".join(f"\n    def m{i}(self, x):\n        return x + {i}\n" for i in range(8)))


def workspace(tmp_path: Path) -> tuple[Document, str, WorkspaceIndex]:
    write(tmp_path, {"app/__init__.py": "", "app/shapes.py": SHAPES, "app/main.py": MAIN.replace("<|>", "")})
    doc, cursor = doc_at(MAIN, uri=(tmp_path / "app/main.py").as_uri())
    return doc, doc.text[:cursor], WorkspaceIndex([tmp_path])


def test_gather_brings_the_definitions_used_near_the_cursor_from_an_imported_module(tmp_path):
    doc, near, index = workspace(tmp_path)
    [snippet] = gather(doc, {}, index, near, 2000)
    assert snippet.path == "app/shapes.py"
    assert snippet.text.startswith("def area(b):\n    return b.w * b.h\n\nclass Box:\n")
    assert "    def __init__(self, w, h): ...\n    def m0(self, x): ..." in snippet.text  # long: an outline


def test_names_imported_by_name_count_as_used_even_when_not_near_the_cursor(tmp_path):
    doc, _, index = workspace(tmp_path)
    [snippet] = gather(doc, {}, index, "    return area(b)", 2000)
    assert "class Box:" in snippet.text and "def unused" not in snippet.text


def test_gather_fits_its_budget_and_returns_nothing_without_one(tmp_path):
    doc, near, index = workspace(tmp_path)
    for budget in (60, 120, 400):
        out = gather(doc, {}, index, near, budget)
        assert out and sum(len(s.path) + len(s.text) for s in out) <= budget
    assert gather(doc, {}, index, near, 0) == []


def test_open_documents_win_over_disk_and_an_open_env_file_is_never_returned(tmp_path):
    doc, near, index = workspace(tmp_path)
    shapes, env = tmp_path / "app/shapes.py", tmp_path / "app/.env"
    open_docs = {shapes.as_uri(): opened(shapes, "def area(b):\n    return 42\n"),
                 env.as_uri(): opened(shapes, "area = 'SECRET'\n"),
                 (tmp_path / "notes.py").as_uri(): opened(shapes, "print(area(b))\n")}
    out = gather(doc, open_docs, index, near, 2000)
    assert out == [Snippet("app/shapes.py", "def area(b):\n    return 42"), Snippet("notes.py", "print(area(b))")]
    assert gather(doc, dict(reversed(open_docs.items())), index, near, 2000) == out


def test_credentials_in_other_files_snippets_are_redacted(tmp_path):
    doc, near, index = workspace(tmp_path)
    shapes = tmp_path / "app/shapes.py"
    open_docs = {shapes.as_uri(): opened(shapes, 'KEY = "AKIAIOSFODNN7EXAMPLE"\n\n\ndef area(b):\n    return 42\n')}
    [snippet] = gather(doc, open_docs, index, near + " + KEY", 2000)  # KEY is used near the cursor
    assert snippet.text == 'KEY = "<redacted>"\n\ndef area(b):\n    return 42'


def test_no_snippet_holds_a_line_of_a_private_key_even_a_window_inside_the_block(tmp_path):
    doc, near, index = workspace(tmp_path)
    keys = tmp_path / "app/keys.py"
    # Lines of the key share names with the code at the cursor: a window inside the block, without its BEGIN and END
    # lines, would be the most similar one (files are redacted whole, before they are cut into windows).
    body = "".join(f"area/b/Box/{i:02d}AAKCAQEA3Tz2mr7SZiAMfQyuvBjM9OiZ1BjP5CE\n" for i in range(40))
    block = 'KEY = """-----BEGIN RSA PRIVATE KEY-----\n{}-----END RSA PRIVATE KEY-----"""'
    head = "def f():\n    pass\n\n\n"
    out = gather(doc, {keys.as_uri(): opened(keys, head + block.format(body) + "\n")}, index, near, 1000)
    assert [s.text for s in out if s.path == "app/keys.py"] == [head + block.format("<redacted>\n")]


def test_open_documents_outside_the_roots_are_never_context(tmp_path):
    doc, near, index = workspace(tmp_path / "project")
    other = tmp_path / "elsewhere" / "scratch.py"
    inside = tmp_path / "project" / "scratch.py"
    open_docs = {other.as_uri(): opened(other, "area(b)\n"), inside.as_uri(): opened(inside, "area(c)\n")}
    assert gather(doc, open_docs, None, near, 2000) == []
    texts = [s.text for s in gather(doc, open_docs, index, near, 2000)]
    assert "area(c)" in texts and "area(b)" not in texts


def test_gather_is_identical_across_calls(tmp_path):
    doc, near, index = workspace(tmp_path)
    first = gather(doc, {}, index, near, 300)
    assert first == gather(doc, {}, index, near, 300) == gather(doc, {}, WorkspaceIndex([tmp_path]), near, 300)


def test_similar_windows_fill_the_budget_left_after_definitions(tmp_path):
    write(tmp_path, {"lib.py": "".join(f"def f{i}():\n    pass\n\n" for i in range(20))
                     + "def g(spam, eggs):\n    return spam.fry(eggs, ham)\n"})
    doc, cursor = doc_at("import lib\n\nx = spam.fry(eggs, ham)<|>\n", uri=(tmp_path / "main.py").as_uri())
    [snippet] = gather(doc, {}, WorkspaceIndex([tmp_path]), doc.text[:cursor], 1000)
    assert snippet.path == "lib.py" and snippet.text.endswith("return spam.fry(eggs, ham)")
    assert "def f0" not in snippet.text


def test_a_real_module_importing_segment_gets_its_definition(shared):
    root = shared / "workspaces" / "rich"
    text = ("from .segment import Segment\nfrom .style import Style\n\n\ndef render(text: str, style: Style):\n"
            "    return [Segment(text, style), Segment.line()]<|>\n")
    doc, cursor = doc_at(text, uri=(root / "rich" / "my_console.py").as_uri())
    out = gather(doc, {}, WorkspaceIndex([root]), doc.text[:cursor], 6000)
    segment = next(s for s in out if s.path == "rich/segment.py")
    assert "class Segment(NamedTuple):\n    text: str\n" in segment.text
    assert "    def line(cls) -> \"Segment\": ..." in segment.text


def test_a_tight_budget_gives_every_imported_name_its_header_before_any_body(tmp_path):
    doc, _, index = workspace(tmp_path)
    [snippet] = gather(doc, {}, index, "    return area(b)", 70)
    assert snippet.text == "def area(b): ...\n\nclass Box: ..."  # area is used near the cursor, Box only imported
    [roomier] = gather(doc, {}, index, "    return area(b)", 2000)
    assert roomier.text.startswith("def area(b):\n    return b.w * b.h\n\nclass Box: ...")


def test_no_similarity_window_comes_from_a_files_import_block(tmp_path):
    write(tmp_path, {"lib.py": "from typing import Any, Dict, List, Optional\nimport os\n\n\n"
                     + "".join(f"def f{i}():\n    pass\n\n" for i in range(12))})
    doc, cursor = doc_at("import lib\nfrom typing import Any, Dict, List, Optional\n\nx: Dict[str, Any] = {}<|>\n",
                         uri=(tmp_path / "main.py").as_uri())
    out = gather(doc, {}, WorkspaceIndex([tmp_path]), doc.text[:cursor], 1000)
    assert not any("import" in s.text for s in out)
