"""Next-edit in Copilot's shape: `textDocument/copilotInlineEdit`, for clients written for GitHub Copilot's
language server (copilot-lsp and sidekick.nvim for Neovim, copilot.el's `copilot-nes-mode` for Emacs).

Params `{textDocument: {uri, version}, position, context?}` -> `{edits: [{range, text, textDocument: {uri,
version}}]}`. As Copilot's server does, it speaks UTF-16 whatever encoding was negotiated (copilot-lsp and
copilot.el convert in UTF-16 themselves), and answers at most one edit (copilot-lsp and copilot.el apply only
the first): the prediction's minimal edits joined into one. No `command` is sent: sparkls sees an accepted
prediction in the buffer itself. The prediction is `sparkls/inlineEdit`'s (`nextedit.predicted`).
"""

from __future__ import annotations

from typing import Any

from sparkls.edit import diff
from sparkls.lsp import convert
from sparkls.lsp.handlers.nextedit import predicted
from sparkls.lsp.protocol import SparkServer

METHOD = "textDocument/copilotInlineEdit"


async def copilot_inline_edit(ls: SparkServer, params: Any) -> dict[str, Any]:
    doc, result = await predicted(ls, params, METHOD, "utf-16")
    if result is None or not result.edits:
        return {"edits": []}
    edit = convert.text_edits(doc, [diff.joined(doc.text, result.edits)], "utf-16")[0]
    return {
        "edits": [
            {
                "range": ls.protocol._converter.unstructure(edit.range),
                "text": edit.new_text,
                "textDocument": {"uri": doc.uri, "version": doc.version},
            }
        ]
    }


FEATURES = [(METHOD, None, copilot_inline_edit)]
