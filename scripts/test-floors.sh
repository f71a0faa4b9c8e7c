#!/usr/bin/env bash
# The tests without real processes on the oldest versions pyproject.toml allows (the pins of
# scripts/floors.txt), so a floor there is one that passes. They run in a venv of their own
# outside the repository, built again only when floors.txt, the requirements in pyproject.toml
# or the Python changed. Extra arguments go to pytest (e.g. -x, or paths to run only those).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="${DDD_CELERY_FLOORS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ddd_celery/floors-venv}"
floors="$root/scripts/floors.txt"

# The venv is what the floors, the project's requirements and the Python make it.
wanted="$(
  "$python" - "$root/pyproject.toml" "$floors" <<'PY' | sha256sum | cut -d' ' -f1
import sys, tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(project["dependencies"], project["optional-dependencies"], sys.version)
print(open(sys.argv[2]).read())
PY
)"
stamp="$venv/.ddd_celery-floors"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "==> building the floors venv in $venv"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet --quiet --constraint "$floors" -e "$root[dev]"
  echo "$wanted" > "$stamp"
  echo "$root" > "$venv/.ddd_celery-root"
elif [ "$(cat "$venv/.ddd_celery-root" 2>/dev/null)" != "$root" ]; then
  # Another checkout (CI clones afresh): the editable install must point at this one.
  "$venv/bin/python" -m pip install --quiet --quiet --no-deps -e "$root"
  echo "$root" > "$venv/.ddd_celery-root"
fi
export PATH="$venv/bin:$PATH"
source scripts/services.sh

echo "==> pytest on the floors: $(
  python - "$floors" <<'PY'
import sys
from importlib.metadata import version

names = [line.split("==")[0] for line in open(sys.argv[1]) if "==" in line and line[0] != "#"]
print(", ".join(f"{name} {version(name)}" for name in names))
PY
)"
# What the floors answer for is how the code runs. Its types are checked by the mypy step, on the
# versions pip resolves: redis-py types the replies of a synchronous client only from 8.0 on, so
# the test that type-checks generated code (and the package's source with it) is left out here.
set +e
python -m pytest -m "not processes" -n 2 -q -p no:cacheprovider \
  --deselect tests/integration/generate/test_generate_job.py::test_what_is_written_passes_mypy_strict "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests on the floors: that is a failure, not a pass" >&2
  exit 1
fi
exit "$status"
