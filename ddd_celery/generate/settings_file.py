"""The platform's job settings: one line per job, edited in place without duplicates.

The file is Python the project owns and may edit: the generator reads it with ``ast``, adds a
job to its ``JOBS`` list when the job is not in it yet, and turns ``RUN_JOBS_BY_DEFAULT`` off
for ``generate worker``. Anything else in the file is left as it is.
"""

from __future__ import annotations

import ast

from ddd_celery.generate.errors import UNREADABLE_FILE, GenerationRefusedError
from ddd_celery.generate.templates import job_settings_module, settings_line
from ddd_celery.scheduling.settings import enabled_variable

JOBS = "JOBS"
RUN_JOBS_BY_DEFAULT = "RUN_JOBS_BY_DEFAULT"


def with_job(current: str | None, job: str) -> str:
    """The settings with ``job`` in ``JOBS``: the same text when it is there already."""
    if current is None:
        return job_settings_module(jobs=[job], run_jobs_by_default=True)
    tree = _parse(current)
    listed = _jobs_list(tree)
    names = [element.value for element in listed.elts if isinstance(element, ast.Constant)]
    if job in names:
        return current
    lines = current.splitlines(keepends=True)
    closing = listed.end_lineno or 0
    last = lines[closing - 1]
    if last.strip() == "]" and closing != listed.lineno:
        lines.insert(closing - 1, settings_line(job))
        return "".join(lines)
    start = _offset(lines, listed.lineno, listed.col_offset)
    end = _offset(lines, closing, listed.end_col_offset or 0)
    kept = [f"    {ast.get_source_segment(current, element)},\n" for element in listed.elts]
    rewritten = "[\n" + "".join(kept) + settings_line(job) + "]"
    return current[:start] + rewritten + current[end:]


def with_jobs_off_by_default(current: str | None) -> str:
    """The settings with ``RUN_JOBS_BY_DEFAULT = False``: the same text when it says so."""
    if current is None:
        return job_settings_module(jobs=[], run_jobs_by_default=False)
    tree = _parse(current)
    value = _assigned(tree, RUN_JOBS_BY_DEFAULT)
    if not isinstance(value, ast.Constant) or not isinstance(value.value, bool):
        raise GenerationRefusedError(
            f"no `{RUN_JOBS_BY_DEFAULT} = True` or `= False` to turn off: add the line, or "
            "pass the default to run_jobs_from_env(os.environ, default=False) yourself",
            code=UNREADABLE_FILE,
        )
    if value.value is False:
        return current
    lines = current.splitlines(keepends=True)
    start = _offset(lines, value.lineno, value.col_offset)
    end = _offset(lines, value.end_lineno or value.lineno, value.end_col_offset or 0)
    return current[:start] + "False" + current[end:]


def _parse(text: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as error:
        raise GenerationRefusedError(
            f"is not valid Python (line {error.lineno}): fix it first", code=UNREADABLE_FILE
        ) from None


def _jobs_list(tree: ast.Module) -> ast.List:
    value = _assigned(tree, JOBS)
    if not isinstance(value, ast.List):
        raise GenerationRefusedError(
            f"has no `{JOBS} = [...]` list of job names to add the job to: add one, with "
            f"job_settings() reading {enabled_variable('<context>.<job>')} through "
            "job_settings_from_env(environ, JOBS)",
            code=UNREADABLE_FILE,
        )
    return value


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value the module assigns to ``name`` at its top level, or None."""
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == name for target in statement.targets
        ):
            return statement.value
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.target.id == name
        ):
            return statement.value
    return None


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """The index in the text of line ``lineno`` (from 1), column ``col`` (UTF-8 bytes)."""
    line = lines[lineno - 1]
    return sum(len(previous) for previous in lines[: lineno - 1]) + len(
        line.encode("utf-8")[:col].decode("utf-8")
    )
