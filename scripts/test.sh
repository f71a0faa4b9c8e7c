#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: install, start services, lint, type-check,
# then every test. Extra arguments go to one pytest run instead (e.g. ./dev test -m 'not processes').
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/bootstrap.sh
source scripts/services.sh

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  # tests/docs/test_site.py looks at the built site in it; tests/web drives the jobs page with it.
  echo "==> installing Debian's chromium and chromium-driver (the browser tests)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

echo "==> ruff check"
ruff check ddd_celery tests examples bench
echo "==> ruff format --check"
ruff format --check ddd_celery tests examples bench
echo "==> mypy --strict ddd_celery"
mypy
echo "==> mkdocs build --strict (the site; a broken link or reference fails)"
site="$(mktemp -d)"
mkdocs build --strict --site-dir "$site"
rm -rf "$site"

run_pytest() {  # pytest "$@"; exit code 5 (no test collected) is a failure, not a pass
  set +e
  python -m pytest "$@"
  local status=$?
  set -e
  if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure, not a pass" >&2
    exit 1
  fi
  if [ "$status" -ne 0 ]; then
    exit "$status"
  fi
}

if [ "$#" -gt 0 ]; then  # a selection given to ./dev test runs as given, in one pytest
  echo "==> pytest $*"
  run_pytest --durations=15 "$@"
  exit 0
fi
# The tests that start no process are spread over two pytest workers (each test keeps its data
# under prefixes of its own); the real celery processes then run alone, since they are timed
# against real clocks and an extra load on this 2-core machine makes a message late.
echo "==> pytest, without real processes, on two workers"
run_pytest -m "not processes" -n 2 --durations=15
echo "==> pytest, the real celery processes"
run_pytest -m processes --durations=15
echo "==> pytest on the dependency floors (scripts/floors.txt), without real processes"
bash scripts/test-floors.sh
