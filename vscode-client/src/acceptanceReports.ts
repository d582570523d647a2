// What became of the ghost text, told to the server (`sparkls/acceptance`; the rules are in core/acceptance.ts):
// the inline completion middleware sees what VS Code got, the editor events what became of it, and the command
// middleware the accept (VS Code runs the item's `sparkls.accepted` command itself, after inserting it).

import * as vscode from 'vscode';
import type { Middleware } from 'vscode-languageclient/node';
import { ACCEPTED, type AcceptanceEvent, acceptedRequestId, GhostTextTracker } from './core/acceptance';

export class AcceptanceReports implements vscode.Disposable {
  private readonly tracker: GhostTextTracker;
  private readonly subscriptions: vscode.Disposable[];

  constructor(send: (e: AcceptanceEvent) => void) {
    this.tracker = new GhostTextTracker(send);
    this.subscriptions = [
      vscode.workspace.onDidChangeTextDocument((e) => this.tracker.changed(e.document.uri.toString(), e.contentChanges)),
      vscode.window.onDidChangeTextEditorSelection((e) => {
        if (e.textEditor !== vscode.window.activeTextEditor) return;
        const s = e.selections.length === 1 ? e.selections[0] : undefined;
        this.tracker.moved(e.textEditor.document.uri.toString(), s?.active ?? { line: -1, character: -1 },
          s?.isEmpty ?? false);
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.tracker.end()),
    ];
  }

  /** The middleware that sees the ghost text VS Code gets. */
  readonly provideInlineCompletionItems: NonNullable<Middleware['provideInlineCompletionItems']> =
    async (document, position, context, token, next) => {
      const result = await next(document, position, context, token);
      const item = (Array.isArray(result) ? result : result?.items ?? [])[0];
      const requestId = item?.command?.command === ACCEPTED ? acceptedRequestId(item.command.arguments) : undefined;
      if (item !== undefined && requestId !== undefined && !token.isCancellationRequested) {
        const text = typeof item.insertText === 'string' ? item.insertText : item.insertText.value;
        this.tracker.shown(requestId, document.uri.toString(), item.range?.start ?? position, text);
      }
      return result;
    };

  /** A command the client runs: the accept of the ghost text shown ends it (the server counts the accept). */
  executed(command: string, args: unknown[]): void {
    if (command === ACCEPTED) this.tracker.accepted(acceptedRequestId(args));
  }

  /** The server is stopping: what it offered is forgotten, untold. */
  forget(): void {
    this.tracker.forget();
  }

  dispose(): void {
    for (const s of this.subscriptions) s.dispose();
  }
}
