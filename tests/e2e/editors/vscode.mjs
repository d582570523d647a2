// Drives VS Code (code-server in headless Debian Chromium, through playwright-core) with the sparkls
// extension installed from its .vsix: ghost text from the real server appears and Tab accepts it; a code
// action from the lightbulb menu edits the file; a streaming rewrite is stopped; the status bar shows tokens/s.
// In `editing` the first keystroke is typed while the model loads, before the status bar shows it ready.
// Usage: node vscode.mjs URL WORKSPACE_DIR OUT_DIR [editing|next-edit]. Writes OUT_DIR/result.json and
// screenshots. `next-edit` (for a scripted engine): after an edit the predicted next edit is shown and Tab applies it.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

// playwright-core is a dev dependency of the extension (vscode-client/node_modules)
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', '..', '..', 'vscode-client', 'package.json'));
const { chromium } = require('playwright-core');

const [url, workspace, outDir, scenario = 'editing'] = process.argv.slice(2);
const timeout = Number(process.env.SPARKLS_VSCODE_TIMEOUT_MS ?? 120000);
const result = { steps: [] };
const save = () => fs.writeFileSync(path.join(outDir, 'result.json'), JSON.stringify(result, null, 2));
const file = path.join(workspace, scenario === 'editing' ? 'calc.py' : 'series.py');
const original = fs.readFileSync(file, 'utf8');

async function step(name, fn) {
  const started = Date.now();
  try {
    await fn();
    result.steps.push({ name, ok: true, ms: Date.now() - started });
  } catch (e) {
    result.steps.push({ name, ok: false, ms: Date.now() - started, error: String(e && e.stack || e) });
    await page.screenshot({ path: path.join(outDir, `failed-${name}.png`) }).catch(() => {});
  }
  save();
}

const browser = await chromium.launch({
  executablePath: process.env.SPARKLS_CHROMIUM ?? '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 720 } });
page.setDefaultTimeout(timeout);

const statusItem = () => page.locator('[id="sparkls.sparkls.sparkls.status"]');  // publisher.name.item
const quickInput = () => page.locator('.quick-input-widget input').first();
const onDisk = () => fs.readFileSync(file, 'utf8');
const editorText = () => page.locator('.monaco-editor .view-lines').first().innerText();

async function command(title) {  // run a command from the command palette
  await page.keyboard.press('F1');
  await quickInput().fill(`>${title}`);
  await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor();
  await page.keyboard.press('Enter');
}

async function goToLine(line, column) {
  await page.keyboard.press('Control+g');
  await quickInput().fill(`:${line}:${column}`);
  await page.keyboard.press('Enter');
}

async function saveFile() {
  await page.keyboard.press('Control+s');
  await page.waitForTimeout(500);
}

async function engineReady() {
  return /^(qwen|fake)/.test((await statusItem().innerText()).trim());
}

async function waitUntil(fn, what, ms = timeout) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await page.waitForTimeout(200);
  }
}

// With SPARKLS_METRICS_PORT: the server's scrape once it counts an accept (of any source: the test checks which),
// which the `sparkls.accepted` command the client runs after the insert tells it.
async function acceptCounted() {
  const port = process.env.SPARKLS_METRICS_PORT;
  if (!port) return undefined;
  const text = await waitUntil(async () => {
    const scraped = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text(), () => '');
    result.metrics_last = scraped;  // what a failure shows when no accept is counted
    return /^sparkls_offers_accepted_total\{source="[^"]+"\} [1-9]/m.test(scraped) ? scraped : undefined;
  }, 'the accept counted in the metrics', 15000);
  delete result.metrics_last;
  return text;
}

await step('open', async () => {
  await page.goto(url);
  await page.locator('.monaco-workbench').waitFor();
  await page.keyboard.press('Control+p');
  await quickInput().fill(path.basename(file));
  await page.locator('.quick-input-list .monaco-list-row', { hasText: path.basename(file) }).first().waitFor();
  await page.keyboard.press('Enter');
  await page.locator('.monaco-editor .view-lines', { hasText: original.split('\n')[0] }).first().waitFor();
  // the extension starts the server; the status bar shows the model once the engine is ready: "$(sparkle) MODEL"
  // (core/status.ts), where it showed "$(loading~spin) sparkls: loading MODEL" (the icons render as no text)
  result.status_loading = await statusItem().innerText();
  if (scenario === 'editing') return;  // the user types at once: the ghost_text step waits for the engine after that
  await waitUntil(engineReady, 'the engine to be ready');
  result.status_ready = await statusItem().innerText();
});

if (scenario === 'next-edit') {
  await step('next_edit', async () => {
    await page.locator('.monaco-editor .view-lines').first().click();
    await goToLine(1, original.indexOf('(1)') + 1);
    await page.keyboard.type('_v2');  // the user renames the first call, then pauses
    await saveFile();
    result.after_typing = onDisk();
    // the prediction is shown as decorations once typing pauses (sparkls.nextEdit.delayMs)
    // (an extension's decoration types render with `ced-` classes)
    await waitUntil(async () => (await page.evaluate(() => document.querySelectorAll('.monaco-editor [class*="ced-"]')
      .length)) > 0, 'the predicted edit');
    await page.waitForTimeout(300);
    await page.screenshot({ path: path.join(outDir, 'next-edit.png') });
    const shown = await editorText();
    await page.keyboard.press('Tab');
    await waitUntil(async () => (await editorText()) !== shown, 'the edit applied by Tab', 10000);
    await saveFile();
    result.after_tab = onDisk();
    result.metrics_after_tab = await acceptCounted();
  });
} else {
  await step('ghost_text', async () => {
    const line = original.split('\n').findIndex((l) => l.endsWith('retu')) + 1;
    await page.locator('.monaco-editor .view-lines').first().click();
    await goToLine(line, 9);
    await page.keyboard.press('End');
    // The user types as soon as the file is open, while the model still loads (a fresh HOME joins and checks it
    // first): that keystroke must end with a suggestion once the engine is ready.
    result.status_when_typed = await statusItem().innerText();
    await page.keyboard.type('r');  // typing asks for an inline completion
    await waitUntil(engineReady, 'the engine to be ready');
    result.status_ready = await statusItem().innerText();
    const ghost = page.locator('.monaco-editor .ghost-text-decoration');
    await ghost.first().waitFor();
    // the rest of the line's ghost text renders in the same frame or the next: wait until the next is drawn
    await page.evaluate(() => new Promise((drawn) => requestAnimationFrame(() => requestAnimationFrame(drawn))));
    result.ghost_text = (await ghost.allTextContents()).join('');
    await page.screenshot({ path: path.join(outDir, 'ghost-text.png') });
    await page.keyboard.press('Tab');
    await saveFile();
    result.file_after_tab = onDisk();
    result.line_after_tab = result.file_after_tab.split('\n')[line - 1];
    result.metrics_after_tab = await acceptCounted();
  });

  await step('status_tokens_per_second', async () => {
    await waitUntil(async () => /tok\/s/.test(await statusItem().innerText()), 'tokens/s in the status bar', 15000);
    result.status_after_generation = await statusItem().innerText();
    await statusItem().screenshot({ path: path.join(outDir, 'status-bar.png') });
  });

  await step('code_action', async () => {
    const before = onDisk();
    const line = before.split('\n').findIndex((l) => l.trim() === 'pass') + 1;
    await goToLine(line, 5);
    await page.keyboard.press('Control+.');
    const item = page.locator('.action-widget .monaco-list-row', { hasText: 'Implement' }).first();
    await item.waitFor();
    result.actions = await page.locator('.action-widget .monaco-list-row').allInnerTexts();
    await page.screenshot({ path: path.join(outDir, 'code-actions.png') });
    const shownBefore = await editorText();
    await item.click({ force: true });  // the list row is under the widget's own hover layer
    // the rewrite streams into the buffer (the status bar spins from before its first line until its end); it is
    // done when the buffer has changed and the status bar no longer spins, then the buffer is saved
    await waitUntil(async () => (await editorText()) !== shownBefore, 'the edit to start');
    await waitUntil(async () => !/sync~spin|codicon-sync/.test(await statusItem().innerHTML()), 'the edit to finish');
    await saveFile();
    result.code_action_after = onDisk();
    result.code_action_before = before;
  });

  await step('stop_rewrite', async () => {
    const before = onDisk();
    const lines = before.split('\n');
    const start = lines.findIndex((l) => l.startsWith('class Shape')) + 1;
    await goToLine(start, 1);
    await page.keyboard.press('Shift+Control+End');
    await command('sparkls: Rewrite Selection');
    await quickInput().fill('rewrite this class as a dataclass with many documented fields and methods');
    await page.keyboard.press('Enter');
    await waitUntil(async () => /sync~spin|codicon-sync/.test(await statusItem().innerHTML()), 'the rewrite to start');
    // stop it once the first rewritten lines are in the buffer
    const shownBefore = await editorText();
    await waitUntil(async () => (await editorText()) !== shownBefore, 'the first streamed lines');
    result.stop_shown_before = shownBefore.replace(/\u00a0/g, ' ');
    result.stop_during = (await editorText()).replace(/\u00a0/g, ' ');
    await page.screenshot({ path: path.join(outDir, 'streaming-rewrite.png') });
    await command('sparkls: Stop Generation');
    await waitUntil(async () => !/sync~spin|codicon-sync/.test(await statusItem().innerHTML()), 'the rewrite to stop',
      15000);
    // the stop is told once the server answered it, which it does after its revert was applied to the buffer
    await waitUntil(async () => (await page.locator('.statusbar-item', { hasText: /stopped/ }).count()) > 0,
      'the stop to be answered', 15000);
    await saveFile();
    result.stop_after = onDisk();
    result.stop_before = before;
    result.stop_message = await page.locator('.statusbar-item', { hasText: /stopped|Rewrite/ }).allInnerTexts();
  });
}

result.done = true;
save();
await browser.close();
