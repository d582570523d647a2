"""Edits: regions, code actions, rewrite prompts, next-edit, running the engine for an edit, minimal diffs,
and applying a streamed edit live."""
