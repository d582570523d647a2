// What the extension sends the server as settings, and which changes need the server restarted (launch only).

/** Keys of the `sparkls` section that configure this extension, not the server. */
export const CLIENT_KEYS = ['server', 'nextEdit', 'trace'] as const;


type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** The server's settings from the `sparkls` configuration section (a plain JSON copy, client keys removed). */
export function serverSettings(section: Record<string, unknown>): Record<string, Json> {
  const plain = JSON.parse(JSON.stringify(section)) as Record<string, Json>;
  for (const key of CLIENT_KEYS) delete plain[key];
  return plain;
}

/**
 * Whether a configuration change needs the server restarted: only how it is launched (`sparkls.server`). The server
 * takes every one of its own settings while it runs (`workspace/didChangeConfiguration`), rebuilding its engine when
 * one the engine is built from changes (docs/settings.md lists them).
 */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return affects('sparkls.server');
}
