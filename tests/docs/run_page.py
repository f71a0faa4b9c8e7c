"""Run the samples of one page, in order, in the current folder: ``python run_page.py PAGE``.

Each snippet runs in a namespace of its own, as a reader who copies that one sample runs it: it
imports what it uses, from the libraries or from the reader's files the page shows, unless its
first line says it continues the sample above (then it runs in that one's names). A file
sample is written at its path and imported; a shell sample runs in bash, here. Top-level
``await`` runs on one event loop for the whole page. The first sample that raises ends the run,
exit code 1, naming the page and the line of the sample.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from samples import extract


def main(page_path: str) -> int:
    page = extract(Path(page_path))
    here = Path.cwd()
    sys.path.insert(0, str(here))
    # the commands a shell sample types are the ones installed beside this interpreter
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    namespace: dict[str, Any] = {}
    loop = asyncio.new_event_loop()
    try:
        for sample in page.samples:
            where = f"{Path(page_path).name}:{sample.line}"
            try:
                if sample.shell:
                    subprocess.run(["bash", "-euc", sample.code], check=True, timeout=120)
                elif sample.path is not None:
                    _import_file(here, sample.path, sample.code)
                else:
                    code = compile(
                        sample.code,
                        where,
                        "exec",
                        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                        dont_inherit=True,  # a sample is a file of its own: no __future__ of ours
                    )
                    if not sample.continues:
                        namespace = {"__name__": "__sample__"}
                    result = eval(code, namespace)
                    if inspect.iscoroutine(result):
                        loop.run_until_complete(result)
            except BaseException:
                print(f"the sample at {where} failed:\n{sample.code}", file=sys.stderr)
                traceback.print_exc()
                return 1
    finally:
        loop.close()
    shown = sum(not sample.hidden for sample in page.samples)
    print(f"{shown} ran, {len(page.skipped)} marked not to run")
    return 0


def _import_file(here: Path, path: str, code: str) -> Any:
    target = here / path
    target.parent.mkdir(parents=True, exist_ok=True)
    for folder in Path(path).parents:
        init = here / folder / "__init__.py"
        if folder != Path(".") and not init.exists():
            init.write_text("")  # the page's shell steps make the packages; they are not run
    target.write_text(code, encoding="utf-8")
    importlib.invalidate_caches()
    return importlib.import_module(path.removesuffix(".py").replace("/", "."))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
