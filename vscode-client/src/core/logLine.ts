// The server's stderr lines into the output channel at their own level: the server logs
// `<date> <time> <LEVEL> <logger>: <message>` (sparkls/tools/cli.py); a line without that head (a traceback,
// native output) continues the record before it.

export type Level = 'error' | 'warn' | 'info' | 'debug' | 'trace';

const LEVELS: Record<string, Level> = {
  CRITICAL: 'error', ERROR: 'error', WARNING: 'warn', INFO: 'info', DEBUG: 'debug',
};
const HEAD = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (CRITICAL|ERROR|WARNING|INFO|DEBUG) (.*)$/;

/** Reads the server's stderr a line at a time, remembering the level of the record being continued. */
export class LogLines {
  private level: Level = 'info';

  /** The level and the text (without the date and level: the channel shows its own) of one stderr line. */
  read(line: string): { level: Level; text: string } {
    const m = HEAD.exec(line);
    if (m === null) return { level: this.level, text: line };
    this.level = LEVELS[m[1]] ?? 'info';
    return { level: this.level, text: m[2] };
  }
}
