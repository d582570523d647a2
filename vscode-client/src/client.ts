// The language client: how the server is started, and what it is sent as settings.

import * as fs from 'node:fs';
import * as readline from 'node:readline';
import type { Readable } from 'node:stream';
import * as vscode from 'vscode';
import { LanguageClient, type LanguageClientOptions, type Middleware, TransportKind } from 'vscode-languageclient/node';
import { LogLines } from './core/logLine';
import { findOnPath, type Launch, serverLaunch } from './core/server';
import { serverSettings } from './core/settings';

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/** The server's launch command from the settings and the PATH, or why there is none. */
export function launch(): Launch | { error: string } {
  const cfg = vscode.workspace.getConfiguration('sparkls');
  const windows = process.platform === 'win32';
  const find = (name: string) => findOnPath(windows ? `${name}.exe` : name, process.env.PATH ?? '', isExecutable,
    windows ? ';' : ':');
  return serverLaunch({ command: cfg.get<string[]>('server.command', []), python: cfg.get<string>('server.python', '') },
    find);
}

/** The server's stderr into `output`, each line at its record's level (the client's default shows all as errors). */
function pipeLog(input: Readable, output: vscode.LogOutputChannel): void {
  const lines = new LogLines();
  readline.createInterface({ input, crlfDelay: Infinity, terminal: false, historySize: 0 }).on('line', (line) => {
    const { level, text } = lines.read(line);
    output[level](text);
  });
}

export function createClient(how: Launch, output: vscode.LogOutputChannel, middleware: Middleware): LanguageClient {
  const section = vscode.workspace.getConfiguration('sparkls') as unknown as Record<string, unknown>;
  const options: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    outputChannel: output,
    initializationOptions: serverSettings(section),
    // Settings changes reach the running server as `workspace/didChangeConfiguration` (the `sparkls` section).
    synchronize: { configurationSection: 'sparkls' },
    middleware,
    stdioOptions: { stdout: pipeLog, stderr: pipeLog },
  };
  return new LanguageClient('sparkls', 'sparkls', { command: how.command, args: how.args, transport: TransportKind.stdio },
    options);
}
