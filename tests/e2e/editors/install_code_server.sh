#!/usr/bin/env bash
# Install code-server (VS Code 1.100.3 in a browser; the newest release for Node 20) from npm into $1, once.
# Its build needs Debian's libkrb5-dev, and ripgrep, which @vscode/ripgrep would download from a host this
# machine cannot reach: its download cache is pre-seeded with a tarball of Debian's `rg` for every package
# version it might be. code-server's postinstall runs npm again, so install scripts are allowed for it, and as
# root it insists on npm_config_unsafe_perm.
set -euo pipefail
prefix=${1:?usage: install_code_server.sh PREFIX}
version=4.100.3
if [ -x "$prefix/node_modules/.bin/code-server" ]; then exit 0; fi
rg=$(command -v rg) || { echo "install Debian's ripgrep first (apt-get install -y ripgrep)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tmp" "$work/home" "$work/rg"
cp "$rg" "$work/rg/rg"
for v in 1.15.{0..14} 1.16.{0..3} 1.17.{0..1} 1.18.0; do
  mkdir -p "$work/tmp/vscode-ripgrep-cache-$v"
  for target in x86_64-unknown-linux-musl aarch64-unknown-linux-musl; do
    for rgv in v13.0.0-10 v13.0.0-13 v14.1.1-1; do
      tar czf "$work/tmp/vscode-ripgrep-cache-$v/ripgrep-$rgv-$target.tar.gz" -C "$work/rg" rg
    done
  done
done
mkdir -p "$prefix"
HOME="$work/home" TMPDIR="$work/tmp" XDG_CACHE_HOME="$work/home/.cache" XDG_CONFIG_HOME="$work/home/.config" \
  npm_config_unsafe_perm=true npm_config_yes=true npm_config_nodedir=/usr npm_config_dangerously_allow_all_scripts=true \
  npm install --no-audit --no-fund --prefix "$prefix" "code-server@$version"
"$prefix/node_modules/.bin/code-server" --version
