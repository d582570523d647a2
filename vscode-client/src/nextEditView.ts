// The predicted next edit in the editor: asked for when typing pauses, shown as decorations (removed text
// struck through, added text after it, the diff in the hover); Tab applies it, Escape dismisses it. The server is
// told: shown and dismissed (`sparkls/acceptance`), applied (the result's `sparkls.accepted` command).

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { AcceptanceEvent } from './core/acceptance';
import { applies, type InlineEditResult, insertsAt, type Range, view } from './core/nextEdit';

const VISIBLE = 'sparkls.nextEditVisible';

function range(r: Range): vscode.Range {
  return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

export class NextEdits implements vscode.Disposable {
  private shown: { editor: vscode.TextEditor; result: InlineEditResult } | undefined;
  private timer: NodeJS.Timeout | undefined;
  private cts: vscode.CancellationTokenSource | undefined;
  private readonly removed = vscode.window.createTextEditorDecorationType({
    textDecoration: 'line-through',
    backgroundColor: new vscode.ThemeColor('diffEditor.removedTextBackground'),
  });
  private readonly added = vscode.window.createTextEditorDecorationType({
    after: {
      color: new vscode.ThemeColor('editorGhostText.foreground'),
      backgroundColor: new vscode.ThemeColor('diffEditor.insertedTextBackground'),
      margin: '0',
    },
  });
  private readonly subscriptions: vscode.Disposable[];

  constructor(private readonly client: () => LanguageClient | undefined, private readonly busy: () => boolean,
    private readonly log: (message: string) => void, private readonly report: (e: AcceptanceEvent) => void) {
    this.subscriptions = [
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (e.contentChanges.length === 0 || e.document !== vscode.window.activeTextEditor?.document) return;
        this.clear();
        this.schedule();
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.clear()),
    ];
  }

  private schedule(): void {
    clearTimeout(this.timer);
    const cfg = vscode.workspace.getConfiguration('sparkls');
    if (!cfg.get<boolean>('nextEdit.enabled', true)) return;
    this.timer = setTimeout(() => void this.predict(), cfg.get<number>('nextEdit.delayMs', 700));
  }

  /** Ask the server for the next edit at the cursor of the active editor and show it. */
  async predict(): Promise<boolean> {
    const editor = vscode.window.activeTextEditor;
    const client = this.client();
    if (editor === undefined || client === undefined || this.busy()) return false;
    this.cts?.cancel();
    const cts = (this.cts = new vscode.CancellationTokenSource());
    const doc = editor.document;
    const { line, character } = editor.selection.active;
    let result: InlineEditResult;
    try {
      result = await client.sendRequest<InlineEditResult>('sparkls/inlineEdit', {
        textDocument: { uri: doc.uri.toString(), version: doc.version }, position: { line, character },
      }, cts.token);
    } catch {
      return false;  // cancelled by a newer keystroke, or the server could not predict (it logs why)
    }
    if (cts.token.isCancellationRequested || !result || !applies(result, doc.uri.toString(), doc.version)) return false;
    if (insertsAt(result, { line, character })) {
      // An insertion at the cursor is the server's inline completion there: shown as ghost text, not twice.
      await vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
      return true;
    }
    this.show(editor, result);
    return true;
  }

  private show(editor: vscode.TextEditor, result: InlineEditResult): void {
    const doc = editor.document;
    const lines = Array.from({ length: doc.lineCount }, (_, i) => doc.lineAt(i).text);
    const v = view(lines, result.edits);
    const hoverMessage = new vscode.MarkdownString(v.markdown);
    editor.setDecorations(this.removed, v.removed.map((r) => ({ range: range(r), hoverMessage })));
    editor.setDecorations(this.added, v.added.map((a) => ({
      range: range({ start: a.at, end: a.at }), hoverMessage, renderOptions: { after: { contentText: a.text } },
    })));
    this.shown = { editor, result };
    void vscode.commands.executeCommand('setContext', VISIBLE, true);
    if (result.requestId !== null) this.report({ requestId: result.requestId, event: 'shown' });
  }

  /** Apply the shown edit if the document is still the version it was predicted for. */
  async accept(): Promise<boolean> {
    const shown = this.hide();
    if (shown === undefined) return false;
    const doc = shown.editor.document;
    if (!applies(shown.result, doc.uri.toString(), doc.version)) {
      this.log(`next edit for v${shown.result.textDocument.version} not applied: the document is at v${doc.version}`);
      return false;
    }
    const edit = new vscode.WorkspaceEdit();
    for (const e of shown.result.edits) edit.replace(doc.uri, range(e.range), e.newText);
    const applied = await vscode.workspace.applyEdit(edit);
    const command = shown.result.command;
    if (applied && command !== undefined) {  // the server counts the accept (the command the client registered)
      try {
        await vscode.commands.executeCommand(command.command, ...(command.arguments ?? []));
      } catch (e) {
        this.log(`the accept of the next edit was not counted: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return applied;
  }

  /** Hide the shown edit; the server is told it was dismissed. */
  clear(): void {
    const shown = this.hide();
    if (shown?.result.requestId) this.report({ requestId: shown.result.requestId, event: 'dismissed' });
  }

  private hide(): { editor: vscode.TextEditor; result: InlineEditResult } | undefined {
    this.cts?.cancel();
    const shown = this.shown;
    if (shown !== undefined) {
      shown.editor.setDecorations(this.removed, []);
      shown.editor.setDecorations(this.added, []);
      this.shown = undefined;
      void vscode.commands.executeCommand('setContext', VISIBLE, false);
    }
    return shown;
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.hide();
    this.removed.dispose();
    this.added.dispose();
    for (const s of this.subscriptions) s.dispose();
  }
}
