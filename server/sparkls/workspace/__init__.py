"""Other files of the workspace: reading them safely, their imports, and the snippets chosen for a prompt; and the
credential-looking values redacted from every prompt."""
