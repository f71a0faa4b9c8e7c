#!/usr/bin/env bash
# Sourced by the ./dev commands: make .venv hold the project and its dev tools, installing only
# when pyproject.toml changed since the last install.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"

if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "ddd_celery needs Python 3.11 or newer; set PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "==> creating $venv"
  "$python" -m venv "$venv"
fi
stamp="$venv/.ddd_celery-installed"
wanted="$(sha256sum < "$root/pyproject.toml" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "==> installing ddd-celery and its dev tools into .venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -e "$root[dev]"
  echo "$wanted" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
