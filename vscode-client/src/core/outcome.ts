// One line for the user about a finished code action or streaming edit (`sparkls.applyAction`'s answer).

export interface Outcome {
  reason: string;
  lines: number;
  applied: number;
  redirects: number;
}

export function describe(actionTitle: string, o: Outcome): string {
  const title = actionTitle.replace(/^sparkls:\s*/, '').replace(/…$/, '');
  const lines = o.lines === 1 ? '1 line' : `${o.lines} lines`;
  const redirects = o.redirects > 0 ? `, redirected ${o.redirects}×` : '';
  switch (o.reason) {
    case 'done':
      return o.lines > 0 ? `sparkls: ${title}: ${lines}${redirects}` : `sparkls: ${title}: done`;
    case 'cancelled':
      return `sparkls: ${title}: stopped after ${lines}`;
    case 'stale':
      return `sparkls: ${title}: the document changed first; ask again`;
    case 'user-edit':
      return `sparkls: ${title}: stopped because you edited the region (${lines} applied)`;
    case 'timeout':
      return `sparkls: ${title}: stopped: the editor did not confirm an edit in time`;
    case 'refused':
      return `sparkls: ${title}: the editor refused the edit`;
    case 'error':
      return `sparkls: ${title}: the engine failed (see the sparkls output)`;
    default:
      return `sparkls: ${title}: ${o.reason}`;
  }
}
