"""Imports per language: their names, and the files they resolve to."""

from __future__ import annotations

from pathlib import Path

from sparkls.workspace.files import WorkspaceIndex
from sparkls.workspace.imports import ImportRef, imports, resolve

from tests.conftest import doc_at
from tests.workspace_support import opened, write


def resolved(tmp_path: Path, current: str) -> dict[str, list[str]]:
    """Each import of `current` -> the files it resolves to, relative to the workspace."""
    doc = opened(tmp_path / current)
    index = WorkspaceIndex([tmp_path])
    return {r.module: [index.relative(p) for p in resolve(r, tmp_path / current, [tmp_path])] for r in imports(doc)}


def test_python_imports_carry_their_names_and_resolve_relative_absolute_and_submodule_forms(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/mod.py": "Z = 1\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/x.py": "def y(): ...\n",
            "pkg/sub/helpers.py": "",
            "a/b.py": "",
            "pkg/sub/main.py": "import a.b\nimport os\nfrom .x import y, w as v\nfrom ..mod import Z\n"
            "from pkg import mod\nfrom . import helpers\n",
        },
    )
    refs = imports(opened(tmp_path / "pkg/sub/main.py"))
    assert [(r.module, r.names) for r in refs] == [
        ("a.b", ()),
        ("os", ()),
        (".x", ("y", "w")),
        ("..mod", ("Z",)),
        ("pkg", ("mod",)),
        (".", ("helpers",)),
    ]
    assert resolved(tmp_path, "pkg/sub/main.py") == {
        "a.b": ["a/b.py"],
        "os": [],
        ".x": ["pkg/sub/x.py"],
        "..mod": ["pkg/mod.py"],
        "pkg": ["pkg/mod.py"],
        ".": ["pkg/sub/helpers.py"],
    }


def test_typescript_imports_exports_and_requires_resolve_relative_specifiers_only(tmp_path):
    write(
        tmp_path,
        {
            "src/m.ts": "export const a = 1;\n",
            "lib/util/index.ts": "",
            "src/r.js": "",
            "src/out.ts": "",
            "src/app.ts": 'import D, {a, b as c} from "./m";\nimport * as ns from "lodash";\n'
            'export {x as y} from "../lib/util";\nconst {p, q: r} = require("./r");\n'
            'import {o} from "./out.js";\nimport "./missing";\nconst lazy = await import("./lazy");\n',
            "src/lazy.tsx": "",
        },
    )
    refs = imports(opened(tmp_path / "src/app.ts"))
    assert [(r.module, r.names) for r in refs] == [
        ("./m", ("D", "a", "b")),
        ("lodash", ()),
        ("../lib/util", ("x",)),
        ("./r", ("p", "q")),
        ("./out.js", ("o",)),
        ("./missing", ()),
        ("./lazy", ()),
    ]
    assert resolved(tmp_path, "src/app.ts") == {
        "./m": ["src/m.ts"],
        "lodash": [],
        "../lib/util": ["lib/util/index.ts"],
        "./r": ["src/r.js"],
        "./out.js": ["src/out.ts"],
        "./missing": [],
        "./lazy": ["src/lazy.tsx"],
    }


def test_go_imports_resolve_through_the_nearest_go_mod_to_the_package_files_without_tests(tmp_path):
    write(
        tmp_path,
        {
            "go.mod": "module example.com/proj\n\ngo 1.22\n",
            "pkg/store/a.go": "package store\n",
            "pkg/store/b.go": "package store\n",
            "pkg/store/a_test.go": "",
            "cmd/main.go": 'package main\n\nimport (\n\t"fmt"\n\ts "example.com/proj/pkg/store"\n)\n',
        },
    )
    assert resolved(tmp_path, "cmd/main.go") == {
        "fmt": [],
        "example.com/proj/pkg/store": ["pkg/store/a.go", "pkg/store/b.go"],
    }


def test_rust_mod_and_use_declarations_resolve_from_the_crate_root_self_and_super(tmp_path):
    write(
        tmp_path,
        {
            "Cargo.toml": '[package]\nname = "demo"\n',
            "src/lib.rs": "mod net;\nmod util;\n",
            "src/util/mod.rs": "pub struct Helper;\n",
            "src/config.rs": "pub struct Config;\n",
            "src/net/tcp.rs": "pub struct Conn;\n",
            "src/net.rs": "mod tcp;\nuse crate::util::Helper;\nuse super::config::{Config, self};\n"
            "use self::tcp::Conn;\nuse std::fmt;\n",
        },
    )
    assert resolved(tmp_path, "src/lib.rs") == {"net": ["src/net.rs"], "util": ["src/util/mod.rs"]}
    refs = imports(opened(tmp_path / "src/net.rs"))
    assert ImportRef("rust", "crate::util", ("Helper",)) in refs
    assert ImportRef("rust", "super::config", ("Config",)) in refs
    assert resolved(tmp_path, "src/net.rs") == {
        "tcp": ["src/net/tcp.rs"],
        "crate::util": ["src/util/mod.rs"],
        "super::config": ["src/config.rs"],
        "super": ["src/config.rs"],
        "self::tcp": ["src/net/tcp.rs"],
        "std": [],
    }


def test_java_imports_resolve_under_the_source_root_found_from_the_package(tmp_path):
    base = "src/main/java/com/acme/"
    write(
        tmp_path,
        {
            base + "model/User.java": "package com.acme.model;\npublic class User {}\n",
            base + "util/Strings.java": "",
            base + "util/Maps.java": "",
            base + "app/Main.java": "package com.acme.app;\n\nimport com.acme.model.User;\nimport com.acme.util.*;\n"
            "import static com.acme.util.Strings.join;\nimport static com.acme.model.User.*;\n"
            "import java.util.List;\n",
        },
    )
    refs = imports(opened(tmp_path / base / "app/Main.java"))
    assert refs[0] == ImportRef("java", "com.acme.model.User", ("User",), package="com.acme.app")
    assert resolved(tmp_path, base + "app/Main.java") == {
        "com.acme.model.User": [base + "model/User.java"],
        "com.acme.util.*": [base + "util/Maps.java", base + "util/Strings.java"],
        "com.acme.util.Strings.join": [base + "util/Strings.java"],
        "com.acme.model.User.*": [base + "model/User.java"],
        "java.util.List": [],
    }


def test_imports_inside_functions_are_left_out_but_conditional_ones_are_kept():
    doc, _ = doc_at("if TYPE_CHECKING:\n    from .a import A\n\ndef f():\n    from .b import B\n<|>")
    assert [r.module for r in imports(doc)] == [".a"]
