// The status bar item: engine state, model and the last generation's tokens/s, polled from the server.

import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { type ClientState, type EngineRequest, type Health, status } from './core/status';

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('sparkls.status', vscode.StatusBarAlignment.Right, 100);
  private state: ClientState = 'starting';
  private health: Health | undefined;
  private requests: EngineRequest[] = [];
  private generating = false;
  private timer: NodeJS.Timeout | undefined;
  private polling = false;
  private readonly becameReady = new vscode.EventEmitter<void>();
  /** Fires when the engine turns ready (its health ok) after the server started or the engine was rebuilt. */
  readonly onDidBecomeReady = this.becameReady.event;

  /** Whether the engine was ready at the last poll. */
  get ready(): boolean {
    return this.state === 'running' && this.health?.ok === true;
  }

  constructor(private readonly client: () => LanguageClient | undefined,
    private readonly log: (message: string) => void) {
    this.item.name = 'sparkls';
    this.item.command = 'sparkls.showLog';
    this.render();
    this.item.show();
  }

  setState(state: ClientState): void {
    this.state = state;
    if (state !== 'running') this.health = undefined;
    this.render();
    this.schedule(state === 'running' ? 200 : 0);
  }

  setGenerating(generating: boolean): void {
    this.generating = generating;
    this.render();
    if (generating) this.schedule(500);
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    if (this.state === 'running' && ms > 0) this.timer = setTimeout(() => void this.poll(), ms);
  }

  private async poll(): Promise<void> {
    const client = this.client();
    if (client === undefined || this.polling || this.state !== 'running') return;
    this.polling = true;
    const wasReady = this.ready;
    try {
      this.health = await client.sendRequest<Health>('sparkls/health', {});
      const m = await client.sendRequest<{ engine: EngineRequest[] }>('sparkls/metrics', {});
      this.requests = m.engine;
    } catch (e) {
      this.log(`status: ${e instanceof Error ? e.message : String(e)}`);  // a restart or stop shows as a state change
    } finally {
      this.polling = false;
    }
    this.render();
    if (!wasReady && this.ready) this.becameReady.fire();
    const loading = this.health !== undefined && !this.health.ok;
    this.schedule(this.generating || loading ? 1000 : 2000);
  }

  private render(): void {
    const s = status(this.state, this.health, this.requests, this.generating);
    this.item.text = s.text;
    this.item.tooltip = s.tooltip;
    this.item.backgroundColor = s.error ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.becameReady.dispose();
    this.item.dispose();
  }
}
