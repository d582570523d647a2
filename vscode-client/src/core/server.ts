// How to start the server: from the settings, or found on the PATH. Pure: the file system is passed in.

export const INSTALL_HINT =
  'Install it with `python3 -m pip install "sparkls[default]"` (or from a clone: `python3 -m pip install -e ".[default]"`), ' +
  'then reload the window, or point `sparkls.server.python` at an interpreter that has it.';

export interface ServerSettings {
  command: string[];
  python: string;
}

export interface Launch {
  command: string;
  args: string[];
}

/** Where `name` is on `pathVar` (`:`- or `;`-separated), given a predicate for executable files. */
export function findOnPath(name: string, pathVar: string, isExecutable: (file: string) => boolean,
  separator = ':'): string | undefined {
  for (const dir of pathVar.split(separator)) {
    if (!dir) continue;
    const file = `${dir.replace(/[\\/]+$/, '')}/${name}`;
    if (isExecutable(file)) return file;
  }
  return undefined;
}

/** The launch command, or a message saying why there is none and how to fix it. */
export function serverLaunch(settings: ServerSettings, find: (name: string) => string | undefined):
  Launch | { error: string } {
  const command = settings.command.filter((part) => part.trim() !== '');
  if (command.length > 0) return { command: command[0], args: command.slice(1) };
  if (settings.python.trim() !== '') return { command: settings.python.trim(), args: ['-m', 'sparkls', 'serve'] };
  const sparkls = find('sparkls');
  if (sparkls !== undefined) return { command: sparkls, args: ['serve'] };
  return { error: `The sparkls language server was not found on the PATH. ${INSTALL_HINT}` };
}
