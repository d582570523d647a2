"""Completions: the context around the cursor, the FIM prompt, when to stop, typed-ahead reuse, and the
pipeline that turns a cursor into a suggestion."""
