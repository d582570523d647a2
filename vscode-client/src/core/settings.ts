// What the extension sends the server as settings, and which changes need the server restarted.

/** Keys of the `sparkls` section that configure this extension, not the server. */
export const CLIENT_KEYS = ['server', 'nextEdit', 'trace'] as const;

/** Server settings that take effect only when the server starts (it refuses them while running). */
export const RESTART_KEYS = ['engine', 'model', 'modelPath', 'threads', 'prefillThreads', 'kvStatesMb', 'contextSize', 'logLevel'] as const;

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The server's settings from the `sparkls` configuration section (a plain JSON copy, client keys removed). */
export function serverSettings(section: Record<string, unknown>): Record<string, Json> {
  const plain = JSON.parse(JSON.stringify(section)) as Record<string, Json>;
  for (const key of CLIENT_KEYS) delete plain[key];
  return plain;
}

/** Whether a configuration change needs the server restarted (`affects('sparkls.engine')` etc.). */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return affects('sparkls.server') || RESTART_KEYS.some((key) => affects(`sparkls.${key}`));
}
