#!/usr/bin/env bash
# Installs the official OpenAI Node SDK the Node tests drive (tests/node: one package, no
# dependencies), where node and npm are installed. Without them, or without the npm registry,
# those tests skip and say why; everything else runs as usual.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -d tests/node/node_modules/openai ] && exit 0
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "node or npm is not installed: the Node SDK tests will skip" >&2
  exit 0
fi
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error >/dev/null \
  || echo "npm could not install the Node SDK: the Node SDK tests will skip" >&2
exit 0
