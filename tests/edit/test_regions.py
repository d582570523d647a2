"""The region an edit rewrites: a definition's whole lines with its decorator, or the selected lines."""

from sparkls.edit import regions
from sparkls.text.document import Document

from tests.conftest import doc_at


def test_the_region_of_a_decorated_method_is_its_whole_lines_with_the_decorator():
    doc, cur = doc_at("class A:\n    @property\n    def v(self):\n        return 1<|>\n\n    x = 2\n")
    r = regions.region_for(doc, cur, cur)
    assert r.kind == "function" and r.name == "v"
    assert r.text(doc) == "    @property\n    def v(self):\n        return 1\n"


def test_a_selection_is_its_own_lines():
    doc = Document.open("file:///t.py", "python", 1, "a = 1\nb = 2\nc = 3\n")
    r = regions.region_for(doc, 7, 9)
    assert (r.kind, r.text(doc)) == ("selection", "b = 2\n")
