"""Text and syntax: document snapshots, tree-sitter parsing, per-language node kinds."""
