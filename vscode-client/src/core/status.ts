// The status bar item's text and tooltip from the server's `sparkls/health` and `sparkls/metrics` answers.

export interface Health {
  ok: boolean;
  engine: string;
  model: string;
  detail: string;
}

export interface EngineRequest {
  requestId: string;
  decode_tokens: number;
  decode_ms: number;
  ttft_ms: number;
  finish_reason: string;
}

export type ClientState = 'starting' | 'running' | 'stopped';

export interface Status {
  text: string;
  tooltip: string;
  error: boolean;
}

/** Decode speed of the newest engine request that generated tokens (tokens/s), or undefined. */
export function tokensPerSecond(requests: EngineRequest[]): number | undefined {
  for (let i = requests.length - 1; i >= 0; i--) {
    const r = requests[i];
    if (r.decode_tokens > 1 && r.decode_ms > 0) return r.decode_tokens / (r.decode_ms / 1000);
  }
  return undefined;
}

/** A short model name: the file or folder name without the extension, `-instruct` or the quantization. */
export function modelName(path: string): string {
  const base = path.split(/[\\/]/).filter((p) => p !== '').pop() ?? path;
  return base.replace(/\.gguf$/i, '').replace(/[-.](q\d[\w]*|f16|bf16|fp16)$/i, '').replace(/-instruct$/i, '');
}

export function status(state: ClientState, health: Health | undefined, requests: EngineRequest[],
  generating: boolean): Status {
  if (state === 'stopped') return { text: '$(circle-slash) sparkls', tooltip: 'sparkls: server stopped', error: true };
  if (state === 'starting' || health === undefined) {
    return { text: '$(loading~spin) sparkls', tooltip: 'sparkls: starting the server', error: false };
  }
  const model = modelName(health.model) || health.engine;
  if (!health.ok) {
    const loading = health.detail === 'loading' || health.detail.startsWith('starting');
    return {
      text: loading ? `$(loading~spin) sparkls: loading ${model}` : '$(error) sparkls',
      tooltip: `sparkls (${health.engine}): ${health.detail}`,
      error: !loading,
    };
  }
  const tps = tokensPerSecond(requests);
  const speed = tps === undefined ? '' : ` · ${tps.toFixed(0)} tok/s`;
  const icon = generating ? '$(sync~spin)' : '$(sparkle)';
  return {
    text: `${icon} ${model}${speed}`,
    tooltip: `sparkls: ${health.engine} engine, ${health.model}\n${health.detail}` +
      (tps === undefined ? '' : `\nlast generation: ${tps.toFixed(1)} tokens/s`),
    error: false,
  };
}
