#!/usr/bin/env bash
# The whole test suite, as a newcomer and CI run it: install, start services, lint, type-check,
# then every test. Extra arguments go to pytest (e.g. ./dev test -m 'not processes and not browser').
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source scripts/bootstrap.sh
source scripts/services.sh

if ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing chromium (tests/docs/test_site.py looks at the built site in it)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
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

echo "==> pytest"
set +e
python -m pytest --durations=15 "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure, not a pass" >&2
  exit 1
fi
if [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ "$#" -eq 0 ]; then  # a selection given to ./dev test is for the main run only
  echo "==> pytest on the dependency floors (scripts/floors.txt), without real processes"
  bash scripts/test-floors.sh
fi
