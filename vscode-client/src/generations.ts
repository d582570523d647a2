// Code actions and rewrites the server streams into the buffer: run one, stop it, redirect it.

import * as vscode from 'vscode';
import { ExecuteCommandRequest, type LanguageClient } from 'vscode-languageclient/node';
import { describe, type Outcome } from './core/outcome';

export const APPLY = 'sparkls.applyAction';
const REDIRECT = 'sparkls.redirect';

/** A code action's data as the server lists it (`sparkls.applyAction`'s first argument). */
export interface ActionData {
  kind: string;
  uri: string;
  version: number;
  title: string;
  instruction?: string;
}

export function isActionData(value: unknown): value is ActionData {
  const v = value as Partial<ActionData> | undefined;
  return typeof v === 'object' && v !== null && typeof v.kind === 'string' && typeof v.uri === 'string';
}

export class Generations implements vscode.Disposable {
  private running: { cts: vscode.CancellationTokenSource; title: string; uri: string } | undefined;
  private readonly changed = new vscode.EventEmitter<boolean>();
  /** Fires true when a generation starts, false when none runs any more. */
  readonly onDidChange = this.changed.event;

  constructor(private readonly client: () => LanguageClient | undefined) {}

  get active(): boolean {
    return this.running !== undefined;
  }

  /** Run an action through the server (streamed into the buffer with `editStreaming`); asks for the
   * instruction of a rewrite. */
  async apply(data: ActionData, instruction?: string): Promise<void> {
    const client = this.client();
    if (client === undefined) return;
    if (data.kind === 'rewrite' && !(instruction ?? data.instruction)) {
      instruction = await vscode.window.showInputBox({
        title: 'sparkls: Rewrite', prompt: 'How should the code be rewritten?',
        placeHolder: 'e.g. use a list comprehension; handle the empty case',
      });
      if (!instruction) return;
    }
    this.running?.cts.cancel();  // one generation at a time: the newest wins
    const cts = new vscode.CancellationTokenSource();
    const run = { cts, title: data.title, uri: data.uri };
    this.running = run;
    await vscode.commands.executeCommand('setContext', 'sparkls.generating', true);
    this.changed.fire(true);
    try {
      const args = instruction === undefined ? [data] : [data, instruction];
      const outcome = await client.sendRequest(ExecuteCommandRequest.type, { command: APPLY, arguments: args },
        cts.token) as Outcome | null | undefined;
      const text = outcome ? describe(data.title, outcome) : describe(data.title, { reason: 'cancelled', lines: 0,
        applied: 0, redirects: 0 });
      vscode.window.setStatusBarMessage(text, 6000);
    } catch (e) {
      if (cts.token.isCancellationRequested) {
        vscode.window.setStatusBarMessage(`sparkls: ${data.title.replace(/^sparkls:\s*/, '')}: stopped`, 6000);
      } else {
        void vscode.window.showErrorMessage(`sparkls: ${e instanceof Error ? e.message : String(e)}`);
      }
    } finally {
      cts.dispose();
      if (this.running === run) {
        this.running = undefined;
        await vscode.commands.executeCommand('setContext', 'sparkls.generating', false);
        this.changed.fire(false);
      }
    }
  }

  /** Stop the running generation (the server reverts or keeps what it applied, by `editCancel`). */
  stop(): boolean {
    if (this.running === undefined) return false;
    this.running.cts.cancel();
    return true;
  }

  /** Give the running generation a new instruction; it goes on from what it has written. */
  async redirect(instruction: string): Promise<string> {
    const client = this.client();
    if (client === undefined || this.running === undefined) return 'nothing is being generated';
    const answer = await client.sendRequest(ExecuteCommandRequest.type,
      { command: REDIRECT, arguments: [instruction, this.running.uri] }) as { redirected: boolean; reason?: string };
    return answer.redirected ? `redirected: ${instruction}` : answer.reason ?? 'not redirected';
  }

  dispose(): void {
    this.running?.cts.cancel();
    this.changed.dispose();
  }
}
