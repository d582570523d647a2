"""Files read safely: secret and vendored paths excluded (globs as in .gitignore), links out of the roots, binary,
oversize and excluded files refused, changed files read again."""

from __future__ import annotations

import os

import pytest
from sparkls.workspace.files import DEFAULT_EXCLUDES, WorkspaceIndex, excluded, refused

from tests.workspace_support import write


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "config/secrets.json",
        "keys/id_rsa",
        "a/.git/config",
        "server.pem",
        "deploy/prod.key",
        "node_modules/x/index.js",
        "home/.ssh/config",
        "certs/client.p12",
        "CREDENTIALS.json",
    ],
)
def test_secret_and_vendored_paths_are_excluded(path):
    assert excluded(path, DEFAULT_EXCLUDES)


@pytest.mark.parametrize("path", ["envelope.py", "keys.py", "src/environment.ts", "docs/git.md", "key_value.go"])
def test_ordinary_source_paths_are_not_excluded(path):
    assert not excluded(path, DEFAULT_EXCLUDES)


def test_a_glob_with_a_slash_matches_the_whole_relative_path_only():
    assert excluded("config/local.yaml", ["config/*.yaml"])
    assert not excluded("app/config/local.yaml", ["config/*.yaml"])


@pytest.mark.parametrize(
    ("path", "glob"),
    [
        ("config/local.yaml", "**/config/*.yaml"),
        ("app/config/local.yaml", "**/config/*.yaml"),
        (".env.prod", "**/.env.*"),
        ("src/gen.py", "src/**/gen.py"),
        ("src/a/b/gen.py", "src/**/gen.py"),
        ("node_modules/x/index.js", "**/node_modules/"),
    ],
)
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
        None,
        None,
        None,
        None,
        "y = 2\n",
    ]


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
