"""Command-line tools: the CLI, the demo, doctor, model conversion and a small stdio LSP client."""
