"""Per-language syntax node kinds (definitions, imports) and a definition's signature (pure)."""

from __future__ import annotations

from tree_sitter import Node

from sparkls.text.document import Document

DEFINITIONS: dict[str, frozenset[str]] = {
    "python": frozenset({"function_definition", "class_definition"}),
    "javascript": frozenset(
        {"function_declaration", "generator_function_declaration", "class_declaration", "method_definition"}
    ),
    "typescript": frozenset(
        {
            "function_declaration",
            "generator_function_declaration",
            "class_declaration",
            "method_definition",
            "interface_declaration",
            "abstract_class_declaration",
        }
    ),
    "go": frozenset({"function_declaration", "method_declaration"}),
    "rust": frozenset({"function_item", "impl_item", "trait_item", "mod_item"}),
    "java": frozenset(
        {
            "class_declaration",
            "interface_declaration",
            "method_declaration",
            "constructor_declaration",
            "enum_declaration",
        }
    ),
    "c": frozenset({"function_definition"}),
    "cpp": frozenset({"function_definition", "class_specifier", "namespace_definition"}),
}
DEFINITIONS["javascriptreact"] = DEFINITIONS["javascript"]
DEFINITIONS["typescriptreact"] = DEFINITIONS["typescript"]

IMPORTS = frozenset(
    {
        "import_statement",
        "import_from_statement",
        "future_import_statement",  # python, js/ts
        "import_declaration",
        "package_clause",
        "package_declaration",  # go, java
        "use_declaration",
        "extern_crate_declaration",  # rust
        "preproc_include",
        "using_declaration",  # c, c++
    }
)

INDENT_LANGUAGES = frozenset({"python"})


def ancestors(node: Node | None) -> list[Node]:
    """`node` and every node above it, innermost first."""
    out: list[Node] = []
    while node is not None:
        out.append(node)
        node = node.parent
    return out


def indent_width(line: str) -> int:
    """Characters of leading spaces and tabs."""
    return len(line) - len(line.lstrip(" \t"))


def indentation(text: str) -> str:
    """The leading spaces and tabs of the first non-blank line of `text`."""
    for line in text.splitlines():
        if line.strip():
            return line[: indent_width(line)]
    return ""


def signature(doc: Document, node: Node) -> str:
    """The header of a definition: its text up to the body, with the body elided."""
    body = node.child_by_field_name("body")
    if body is None:
        return doc.source[node.start_byte : node.end_byte].decode("utf-8", "replace").split("\n", 1)[0]
    head = doc.source[node.start_byte : body.start_byte].decode("utf-8", "replace").rstrip()
    if doc.language in INDENT_LANGUAGES:
        return head + " ..."
    return head + " { ... }"
