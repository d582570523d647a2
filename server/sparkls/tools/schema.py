"""`sparkls schema`: the settings' JSON schema, and the VS Code extension's configuration made from it.

The extension's `package.json` has two configuration sections: the server's settings (generated here,
one `sparkls.<key>` per setting, in the model's order) and the client's own (how to start the server),
which this module leaves alone. `tests/tools/test_schema.py` fails when `package.json` is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparkls.settings import SECRETS, Settings, json_schema

SECTION_TITLE = "sparkls: server"
_KEYWORDS = ("type", "default", "enum", "minimum", "maximum", "items")


def vscode_configuration(schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `contributes.configuration` section for the server's settings."""
    schema = schema or json_schema()
    secret_keys = {Settings.model_fields[name].alias for name in SECRETS}
    properties: dict[str, Any] = {}
    for order, (key, prop) in enumerate(schema["properties"].items()):
        entry = {k: prop[k] for k in _KEYWORDS if k in prop}
        entry["markdownDescription"] = prop["description"]
        entry["order"] = order
        if key in secret_keys:  # VS Code keeps settings in plain JSON: point to the environment variable
            entry["markdownDescription"] += " Prefer the environment variable over a settings file."
        properties[f"sparkls.{key}"] = entry
    return {"title": SECTION_TITLE, "properties": properties}


def update_package(path: Path) -> bool:
    """Write the generated section into an extension's `package.json`; True when it changed."""
    package = json.loads(path.read_text())
    sections: list[dict[str, Any]] = package.setdefault("contributes", {}).setdefault("configuration", [])
    generated = vscode_configuration()
    kept = [s for s in sections if s.get("title") != SECTION_TITLE]
    new_sections = [generated, *kept]
    if new_sections == sections:
        return False
    package["contributes"]["configuration"] = new_sections
    path.write_text(json.dumps(package, indent=2, ensure_ascii=False) + "\n")
    return True


def run_schema(vscode: bool, update: str) -> int:
    if update:
        changed = update_package(Path(update))
        print(f"{update}: {'updated' if changed else 'already current'}")
        return 0
    print(json.dumps(vscode_configuration() if vscode else json_schema(), indent=2, ensure_ascii=False))
    return 0
