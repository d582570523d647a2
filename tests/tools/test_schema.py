"""`sparkls schema` and the VS Code extension's `contributes.configuration` agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sparkls.tools.schema import SECTION_TITLE, vscode_configuration

PACKAGE = Path(__file__).resolve().parents[2] / "vscode-client" / "package.json"


def test_the_extension_configuration_is_generated_from_the_current_settings():
    sections = json.loads(PACKAGE.read_text())["contributes"]["configuration"]
    (server,) = [s for s in sections if s["title"] == SECTION_TITLE]
    fix = "python3 -m sparkls schema --update-package vscode-client/package.json"
    assert server == vscode_configuration(), f"vscode-client/package.json is stale: run `{fix}`"


def test_every_setting_in_sparkls_schema_is_offered_in_vscode_with_the_same_default_and_limits():
    schema = json.loads(
        subprocess.run([sys.executable, "-m", "sparkls", "schema"], capture_output=True, text=True, check=True).stdout
    )
    sections = json.loads(PACKAGE.read_text())["contributes"]["configuration"]
    offered = {k: v for s in sections for k, v in s["properties"].items()}
    for key, prop in schema["properties"].items():
        vs = offered[f"sparkls.{key}"]
        for field in ("type", "default", "enum", "minimum", "maximum"):
            assert vs.get(field) == prop.get(field), (key, field)
    client_only = {k for s in sections if s["title"] != SECTION_TITLE for k in s["properties"]}
    assert not {k.removeprefix("sparkls.") for k in client_only} & set(schema["properties"])


def test_the_client_settings_are_the_keys_the_extension_keeps_from_the_server():
    source = (PACKAGE.parent / "src" / "core" / "settings.ts").read_text()
    sections = json.loads(PACKAGE.read_text())["contributes"]["configuration"]
    client_roots = {k.split(".")[1] for s in sections if s["title"] != SECTION_TITLE for k in s["properties"]}
    line = next(li for li in source.splitlines() if li.startswith("export const CLIENT_KEYS"))
    assert {w.strip("'") for w in line.split("[")[1].split("]")[0].split(", ")} == client_roots
