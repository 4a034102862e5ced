#!/usr/bin/env bash
# Installs the Debian packages Deja's tests and benchmarks use, when they are missing.
set -euo pipefail
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# redis-cli builds the tests' Redis Cluster (`--cluster create`); redis-server depends on it in
# Debian, but a redis-server found elsewhere (built, or another package) may come without it.
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
# tests/deploy/ validates docker-compose.yml with it; it validates offline, without a daemon.
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
# promtool checks /metrics scrapes and tests the alert rules (tests/deploy, tests/integration).
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# tests/e2e/test_dashboard_browser.py drives the dashboard in a headless Chromium (DevTools
# protocol); it skips, saying so, only where no chromium is installed.
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
[ ${#need[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing ${need[*]} from Debian packages" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq || true
# No recommends: docker-compose's would pull in docker.io, a whole container runtime.
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The packages' own services are not what the tests use: they start their own Redis on a free
# port, and need only promtool from the prometheus package.
if command -v systemctl >/dev/null 2>&1; then
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
  $sudo systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
