// The sparkls extension: starts the language server and wires its features into VS Code.
//
// Ghost text comes from LSP inline completion (VS Code's own accept, accept word and accept line), code
// actions from the server's list. What LSP has no UI for is added here: streaming rewrites that can be
// stopped and redirected (`generations.ts`), the predicted next edit (`nextEditView.ts`), the status
// bar (`statusBar.ts`) and what became of each suggestion, told to the server (`acceptanceReports.ts`).
// The pure logic lives in `core/` and is unit-tested with node's test runner.

import * as vscode from 'vscode';
import { type LanguageClient, State } from 'vscode-languageclient/node';
import { AcceptanceReports } from './acceptanceReports';
import { createClient, launch } from './client';
import { ACCEPTANCE, type AcceptanceEvent } from './core/acceptance';
import { INSTALL_HINT } from './core/server';
import { needsRestart } from './core/settings';
import { APPLY, type ActionData, Generations, isActionData } from './generations';
import { NextEdits } from './nextEditView';
import { StatusBar } from './statusBar';

class Sparkls implements vscode.Disposable {
  client: LanguageClient | undefined;
  readonly output = vscode.window.createOutputChannel('sparkls', { log: true });
  readonly generations = new Generations(() => this.client);
  readonly status = new StatusBar(() => this.client, (m) => this.output.debug(m));
  readonly acceptance = new AcceptanceReports((e) => this.report(e));
  readonly nextEdits = new NextEdits(() => this.client, () => this.generations.active, (m) => this.output.info(m),
    (e) => this.report(e));
  private typedWhileLoading = false;  // the user edited the active file before the engine was ready

  async start(): Promise<void> {
    const how = launch();
    if ('error' in how) {
      this.status.setState('stopped');
      this.output.info(how.error);
      void vscode.window.showErrorMessage(how.error, 'Open Settings', 'Show Log').then((choice) => {
        if (choice === 'Open Settings') void vscode.commands.executeCommand('workbench.action.openSettings', 'sparkls.server');
        if (choice === 'Show Log') this.output.show();
      });
      return;
    }
    this.output.info(`starting: ${how.command} ${how.args.join(' ')}`);
    const client = createClient(how, this.output, {
      // VS Code shows the server's suggestion as ghost text (inline completion); the same suggestion again in
      // the suggestion list would compete with it for Tab and cost the engine a second request per keystroke.
      provideCompletionItem: () => undefined,
      provideInlineCompletionItems: this.acceptance.provideInlineCompletionItems,
      executeCommand: async (command, args, next) => {
        this.acceptance.executed(command, args);
        if (command === APPLY && isActionData(args[0])) {
          return this.generations.apply(args[0], typeof args[1] === 'string' ? args[1] : undefined);
        }
        return next(command, args);
      },
    });
    client.onDidChangeState((e) => {
      this.status.setState(e.newState === State.Running ? 'running' : e.newState === State.Starting ? 'starting'
        : 'stopped');
    });
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      this.status.setState('stopped');
      const message = `sparkls: the server did not start (${e instanceof Error ? e.message : String(e)}). ` +
        INSTALL_HINT;
      this.output.info(message);
      void vscode.window.showErrorMessage(message, 'Show Log').then((c) => c && this.output.show());
    }
  }

  /** Tell the running server what became of one of its offers (`sparkls/acceptance`). */
  report(e: AcceptanceEvent): void {
    const client = this.client;
    if (client === undefined || !client.isRunning()) return;
    client.sendNotification(ACCEPTANCE, e).catch((err: unknown) => this.output.debug(`${ACCEPTANCE}: ${String(err)}`));
  }

  async restart(): Promise<void> {
    this.nextEdits.clear();
    this.acceptance.forget();
    this.generations.stop();
    const old = this.client;
    this.client = undefined;
    if (old !== undefined) {
      try {
        await old.stop(5000);
      } catch (e) {
        this.output.info(`stopping the server: ${e instanceof Error ? e.message : String(e)}`);
      }
      await old.dispose();
    }
    await this.start();
  }

  /** "Rewrite Selection…": the server's rewrite action for the selected lines, with an instruction. */
  async rewriteSelection(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (editor === undefined || editor.selection.isEmpty) {
      void vscode.window.showInformationMessage('sparkls: select the code to rewrite first.');
      return;
    }
    const found = await vscode.commands.executeCommand<(vscode.CodeAction | vscode.Command)[]>(
      'vscode.executeCodeActionProvider', editor.document.uri, editor.selection,
      vscode.CodeActionKind.RefactorRewrite.value) ?? [];
    const data = found.map((a) => ('command' in a && typeof a.command === 'object' ? a.command : a) as vscode.Command)
      .filter((c) => c.command === APPLY).map((c) => c.arguments?.[0])
      .find((d): d is ActionData => isActionData(d) && d.kind === 'rewrite');
    if (data === undefined) {
      void vscode.window.showInformationMessage('sparkls: the server offers no rewrite here (is it running?).');
      return;
    }
    await this.generations.apply(data);
  }

  async redirect(): Promise<void> {
    if (!this.generations.active) {
      void vscode.window.showInformationMessage('sparkls: nothing is being generated.');
      return;
    }
    const instruction = await vscode.window.showInputBox({
      title: 'sparkls: Redirect', prompt: 'New instruction for the running generation (it goes on from here)',
    });
    if (instruction) vscode.window.setStatusBarMessage(`sparkls: ${await this.generations.redirect(instruction)}`, 6000);
  }

  commands(): vscode.Disposable[] {
    const c = vscode.commands.registerCommand;
    return [
      c('sparkls.rewriteSelection', () => this.rewriteSelection()),
      c('sparkls.redirectGeneration', () => this.redirect()),
      c('sparkls.stopGeneration', () => this.generations.stop()),
      c('sparkls.predictNextEdit', () => this.nextEdits.predict()),
      c('sparkls.acceptNextEdit', () => this.nextEdits.accept()),
      c('sparkls.dismissNextEdit', () => this.nextEdits.clear()),
      c('sparkls.restartServer', () => this.restart()),
      c('sparkls.showLog', () => this.output.show()),
      this.generations.onDidChange((running) => this.status.setGenerating(running)),
      // VS Code cancels an inline request when the next keystroke or the suggest widget replaces it, and does not
      // ask again: keystrokes typed while the model loaded would get nothing. Once it is ready, ask once more.
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (!this.status.ready && e.contentChanges.length > 0 && e.document === vscode.window.activeTextEditor?.document) {
          this.typedWhileLoading = true;
        }
      }),
      this.status.onDidBecomeReady(() => {
        if (!this.typedWhileLoading) return;
        this.typedWhileLoading = false;
        this.output.info('the engine is ready: asking again for the suggestion typed while it loaded');
        void vscode.commands.executeCommand('editor.action.inlineSuggest.trigger');
      }),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (needsRestart((section) => e.affectsConfiguration(section))) void this.restart();
      }),
    ];
  }

  dispose(): void {
    this.acceptance.dispose();
    this.nextEdits.dispose();
    this.generations.dispose();
    this.status.dispose();
    this.output.dispose();
  }
}

let sparkls: Sparkls | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<Sparkls> {
  sparkls = new Sparkls();
  context.subscriptions.push(sparkls, ...sparkls.commands());
  await sparkls.start();
  return sparkls;
}

export async function deactivate(): Promise<void> {
  const client = sparkls?.client;
  sparkls = undefined;
  if (client !== undefined) await client.stop(5000);
}
