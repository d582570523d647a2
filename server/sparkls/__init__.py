"""sparkls: a language server for real-time AI code completion and editing."""

__version__ = "0.1.0"
