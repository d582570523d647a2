"""The outline of a file (pure): which nodes are definitions and imports per language, a definition's
signature (its header with the body elided), and the preamble of a completion prompt: the imports and
signatures of definitions above the prefix window (the anchored layout takes them in file order, so the
preamble does not change from place to place; the `prefix` layout ranks the ones the enclosing scope calls first)."""

from __future__ import annotations

import re

from tree_sitter import Node

from sparkls.text.document import Document
from sparkls.text.nodes import DEFINITIONS, IMPORTS, signature


def _outline(doc: Document, node: Node, limit: int, depth: int = 0) -> list[tuple[int, str, str]]:
    """(start byte, name, signature) of definitions in `node` starting before byte `limit`,
    one level into classes."""
    kinds = DEFINITIONS.get(doc.language, frozenset())
    out: list[tuple[int, str, str]] = []
    for child in node.children:
        if child.start_byte >= limit:
            break
        target = child
        if child.type in ("decorated_definition", "export_statement"):
            target = next((c for c in child.children if c.type in kinds), child)
        if target.type in kinds:
            name_node = target.child_by_field_name("name")
            name = doc.source[name_node.start_byte : name_node.end_byte].decode() if name_node else ""
            sig = signature(doc, target)
            pad = "    " * depth
            out.append((target.start_byte, name, pad + sig.replace("\n", "\n" + pad)))
            body = target.child_by_field_name("body")
            if (
                depth == 0
                and body is not None
                and target.type
                not in ("function_definition", "function_item", "function_declaration", "method_declaration")
            ):
                out.extend(_outline(doc, body, limit, depth + 1))
        elif depth == 0 and child.type in ("declaration_list", "class_body"):
            out.extend(_outline(doc, child, limit, depth))
    return out


_CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def build_preamble(doc: Document, start: int, scope_text: str, budget_chars: int) -> str:
    """Imports and signatures of definitions before `start`, in file order; with `scope_text`, the ones it calls
    are chosen first. Without it, the outline stops at the first signature that does not fit: the result is then
    the same for every `start` below the last one taken (a prompt head that does not move with the cursor)."""
    if doc.tree is None or budget_chars <= 0 or start <= 0:
        return ""
    lo = doc.byte_offset(start)  # positions below are bytes
    parts: list[tuple[int, str]] = []
    used = 0
    for child in doc.tree.root_node.children:
        if child.start_byte >= lo:
            break
        if child.type in IMPORTS:
            text = doc.source[child.start_byte : child.end_byte].decode("utf-8", "replace")
            if used + len(text) + 1 > budget_chars // 2:
                break
            parts.append((child.start_byte, text))
            used += len(text) + 1
    called = set(_CALL.findall(scope_text))
    outline = _outline(doc, doc.tree.root_node, lo)
    ranked = sorted(outline, key=lambda d: (d[1] not in called, d[0]))
    chosen: list[tuple[int, str]] = []
    for start, _name, sig in ranked:
        if used + len(sig) + 1 > budget_chars:
            if not called:
                break
            continue
        chosen.append((start, sig))
        used += len(sig) + 1
    parts.extend(chosen)
    parts.sort()
    return "\n".join(text for _, text in parts)
