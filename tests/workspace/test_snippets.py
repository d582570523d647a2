"""Snippets of other files, chosen within a budget: the definitions used near the cursor, then similar windows;
open documents first, nothing from outside the roots, credentials redacted."""

from __future__ import annotations

from pathlib import Path

from sparkls.text.document import Document
from sparkls.workspace.files import WorkspaceIndex
from sparkls.workspace.snippets import Snippet, gather

from tests.conftest import doc_at
from tests.workspace_support import opened, write

MAIN = "from .shapes import area, Box\n\ndef report(b):\n    return area(b)<|>\n"
SHAPES = (
    "def area(b):\n    return b.w * b.h\n\n\ndef unused():\n    return 0\n\n\nclass Box:\n"
    "    def __init__(self, w, h):\n        self.w = w\n        self.h = h\n"
    + "".join(f"\n    def m{i}(self, x):\n        return x + {i}\n" for i in range(8))
)


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
    open_docs = {
        shapes.as_uri(): opened(shapes, "def area(b):\n    return 42\n"),
        env.as_uri(): opened(shapes, "area = 'SECRET'\n"),
        (tmp_path / "notes.py").as_uri(): opened(shapes, "print(area(b))\n"),
    }
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
    write(
        tmp_path,
        {
            "lib.py": "".join(f"def f{i}():\n    pass\n\n" for i in range(20))
            + "def g(spam, eggs):\n    return spam.fry(eggs, ham)\n"
        },
    )
    doc, cursor = doc_at("import lib\n\nx = spam.fry(eggs, ham)<|>\n", uri=(tmp_path / "main.py").as_uri())
    [snippet] = gather(doc, {}, WorkspaceIndex([tmp_path]), doc.text[:cursor], 1000)
    assert snippet.path == "lib.py" and snippet.text.endswith("return spam.fry(eggs, ham)")
    assert "def f0" not in snippet.text


def test_a_real_module_importing_segment_gets_its_definition(shared):
    root = shared / "workspaces" / "rich"
    text = (
        "from .segment import Segment\nfrom .style import Style\n\n\ndef render(text: str, style: Style):\n"
        "    return [Segment(text, style), Segment.line()]<|>\n"
    )
    doc, cursor = doc_at(text, uri=(root / "rich" / "my_console.py").as_uri())
    out = gather(doc, {}, WorkspaceIndex([root]), doc.text[:cursor], 6000)
    segment = next(s for s in out if s.path == "rich/segment.py")
    assert "class Segment(NamedTuple):\n    text: str\n" in segment.text
    assert '    def line(cls) -> "Segment": ...' in segment.text


def test_a_tight_budget_gives_every_imported_name_its_header_before_any_body(tmp_path):
    doc, _, index = workspace(tmp_path)
    [snippet] = gather(doc, {}, index, "    return area(b)", 70)
    assert snippet.text == "def area(b): ...\n\nclass Box: ..."  # area is used near the cursor, Box only imported
    [roomier] = gather(doc, {}, index, "    return area(b)", 2000)
    assert roomier.text.startswith("def area(b):\n    return b.w * b.h\n\nclass Box: ...")


def test_no_similarity_window_comes_from_a_files_import_block(tmp_path):
    write(
        tmp_path,
        {
            "lib.py": "from typing import Any, Dict, List, Optional\nimport os\n\n\n"
            + "".join(f"def f{i}():\n    pass\n\n" for i in range(12))
        },
    )
    doc, cursor = doc_at(
        "import lib\nfrom typing import Any, Dict, List, Optional\n\nx: Dict[str, Any] = {}<|>\n",
        uri=(tmp_path / "main.py").as_uri(),
    )
    out = gather(doc, {}, WorkspaceIndex([tmp_path]), doc.text[:cursor], 1000)
    assert not any("import" in s.text for s in out)
