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
    return 1
  fi
  return "$status"
}

if [ "$#" -gt 0 ]; then  # a selection given to ./dev test runs as given, in one pytest
  echo "==> pytest $*"
  run_pytest --durations=15 "$@"
  exit 0
fi

# Two lanes at once, so the run takes the time of the longer one, not of both:
# - the real celery processes, on two pytest workers, each test module on one worker (a module's
#   processes are shared by its tests); they mostly wait on beat's and the workers' clocks;
# - the tests that start no process, then the same on the dependency floors: CPU-bound, so under
#   nice, and the beats and workers the first lane times get the CPU when they need it.
# Each lane writes to a log of its own, printed whole when both have ended.
logs="$(mktemp -d)"
processes_lane() {
  run_pytest -m processes -n 2 --dist loadscope --durations=15
}
cpu_lane() {
  run_pytest -m "not processes" -n 2 --durations=15 && bash scripts/test-floors.sh
}
progress() {  # "done/collected" of the newest pytest run in log $1, from its progress dots
  awk '/ workers \[[0-9]+ items\]/ { total = $(NF - 1); sub(/\[/, "", total); done = 0; next }
       total && /^[.FEsxX]+( +\[ *[0-9]+%\])?$/ { line = $1; done += gsub(/[.FEsxX]/, "", line) }
       END { if (total) printf "%d/%d", done, total; else printf "starting" }' "$1"
}
started=$SECONDS
echo "==> pytest in two lanes: the real celery processes | the rest, then the rest on the floors"
lane() {  # lane NAME: run NAME_lane in the background; its exit code goes to $logs/NAME.status
  local status=0
  "$1_lane" >"$logs/$1.log" 2>&1 || status=$?
  echo "$status" >"$logs/$1.status"
}
lane processes &
(renice -n 10 -p "$BASHPID" >/dev/null && lane cpu) &
while [ ! -e "$logs/processes.status" ] || [ ! -e "$logs/cpu.status" ]; do
  sleep 5
  if [ $(((SECONDS - started) % 60)) -lt 5 ]; then
    echo "    $((SECONDS - started)) s: $(
      for name in processes cpu; do
        if [ -e "$logs/$name.status" ]; then echo -n "$name done; "
        else echo -n "$name $(progress "$logs/$name.log"); "
        fi
      done)"
  fi
done
wait
failed=0
for name in cpu processes; do
  status="$(cat "$logs/$name.status")"
  echo "==> lane $name: exit $status"
  cat "$logs/$name.log"
  [ "$status" -eq 0 ] || failed=1
done
echo "==> both lanes ended in $((SECONDS - started)) s"
rm -rf "$logs"
exit "$failed"
