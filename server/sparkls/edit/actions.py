"""Which edit actions apply at a range, and what each asks the model (pure and model-free).

Listing is instant: tree-sitter decides which actions make sense (fix the diagnostic under the
cursor, implement a stub, add a docstring, add type annotations, rewrite with an instruction, apply
the predicted next edit); the model runs only when one is chosen. An `Action` is plain data that
travels through the client and back (`codeAction/resolve` data, `executeCommand` arguments).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

from sparkls.edit import regions
from sparkls.text.document import Document

KINDS = ("fix", "implement", "docstring", "annotate", "rewrite", "predicted")
TITLES = {
    "implement": "sparkls: Implement {name}",
    "docstring": "sparkls: Add a docstring to {name}",
    "annotate": "sparkls: Add type annotations to {name}",
    "rewrite": "sparkls: Rewrite with an instruction…",
    "predicted": "sparkls: Apply predicted edit",
}


@dataclass(frozen=True)
class Problem:
    """A diagnostic from the request's context, in string offsets."""

    start: int
    end: int
    message: str
    source: str = ""


@dataclass(frozen=True)
class Action:
    kind: str  # one of KINDS
    uri: str
    version: int
    start: int  # the region it rewrites (whole lines)
    end: int
    title: str
    diagnostic: str = ""  # fix: the diagnostic's message
    instruction: str = ""  # rewrite: the user's instruction (clients ask for it)

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, value: object) -> Action:
        if not isinstance(value, dict):
            raise ValueError(f"not a sparkls action: {value!r}")
        data = cast(dict[str, Any], value)
        if data.get("kind") not in KINDS:
            raise ValueError(f"not a sparkls action: {data!r}")
        try:
            return cls(
                kind=str(data["kind"]),
                uri=str(data["uri"]),
                version=int(data["version"]),
                start=int(data["start"]),
                end=int(data["end"]),
                title=str(data.get("title", "")),
                diagnostic=str(data.get("diagnostic", "")),
                instruction=str(data.get("instruction", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed sparkls action: {e}") from None


def instruction_of(action: Action, language: str) -> str:
    """What the model is asked to do with the region."""
    if action.kind == "fix":
        return (
            f"Fix this problem reported for the code: {action.diagnostic}\n"
            "Change as little as possible; keep everything else exactly as it is."
        )
    if action.kind == "implement":
        return (
            "This function is a stub. Replace its placeholder body (`pass`, `...`, a TODO) with a complete, "
            "working implementation of what its name, signature and docstring describe. Keep the signature and "
            "the docstring unchanged."
        )
    if action.kind == "docstring":
        style = "a docstring" if language == "python" else "a doc comment right above it"
        return f"Add {style} that explains what this code does, its parameters and its result. Do not change the code."
    if action.kind == "annotate":
        return "Add type annotations to the parameters and the return type. Do not change anything else."
    return action.instruction or "Improve this code."


def _title(kind: str, name: str) -> str:
    return TITLES[kind].format(name=f"`{name}`" if name else "this function")


def available(doc: Document, start: int, end: int, problems: list[Problem]) -> list[Action]:
    """The actions for [start, end) of a snapshot; no model call."""
    out: list[Action] = []

    def add(kind: str, region: regions.Region, title: str, diagnostic: str = "") -> None:
        out.append(Action(kind, doc.uri, doc.version, region.start, region.end, title, diagnostic))

    for p in problems:
        if p.start <= max(start, end) and p.end >= start:
            region = regions.region_for(doc, p.start, p.start, ("function", "statement"), max_lines=80)
            message = p.message.strip().splitlines()[0] if p.message.strip() else "problem"
            short = message if len(message) <= 60 else message[:57] + "..."
            add("fix", region, f"sparkls: Fix `{short}`", p.message.strip())
    func = regions.enclosing(doc, start, end, ("function",))
    if func is not None:
        region = regions.region_for(doc, start, start, ("function",))
        if regions.is_stub(doc, func):
            add("implement", region, _title("implement", region.name))
        if regions.docstring_node(doc, func) is None:
            add("docstring", region, _title("docstring", region.name))
        if regions.missing_annotations(doc, func):
            add("annotate", region, _title("annotate", region.name))
    add("rewrite", regions.region_for(doc, start, end), TITLES["rewrite"])
    return out
