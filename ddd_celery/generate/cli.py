"""``ddd-celery``: the console script of the generator.

argparse rather than click: the generator only writes files, so it needs nothing but the
standard library and the declarations, and works before Celery (which brings click) is
installed. Exit codes: 0 written or already there, 1 refused (nothing written), 2 a command
line that cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ddd_celery.generate.files import Written
from ddd_celery.generate.generator import generate_background_job, generate_job, generate_worker

REFUSED = 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ddd-celery`` with ``argv`` (the process's arguments when None); the exit code."""
    arguments = _parser().parse_args(argv)
    root = Path(arguments.project_root)
    try:
        if arguments.what == "job":
            written = generate_job(
                root,
                arguments.context,
                arguments.job_class,
                cron=arguments.cron,
                every=arguments.every,
                time_zone=arguments.time_zone,
                command=arguments.command,
                package=arguments.package,
            )
        elif arguments.what == "background-job":
            written = generate_background_job(
                root,
                arguments.context,
                arguments.job_class,
                command=arguments.command,
                package=arguments.package,
            )
        else:
            written = generate_worker(root, app=arguments.app, package=arguments.package)
    except ValueError as error:  # DeclarationError, GenerationRefusedError: all refusals
        print(f"ddd-celery: nothing written: {error}", file=sys.stderr)
        return REFUSED
    _report(written)
    return 0


def _report(written: list[Written]) -> None:
    for file in written:
        print(f"{file.change.value:>9}  {file.path.as_posix()}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ddd-celery", description="Generate the files of jobs and of the worker."
    )
    commands = parser.add_subparsers(dest="command_group", required=True, metavar="generate")
    generate = commands.add_parser("generate", help="write a job, a background job or the worker")
    kinds = generate.add_subparsers(dest="what", required=True)

    job = kinds.add_parser(
        "job",
        help="a @scheduled job, its command, its spec and its line in the job settings",
        description="Example: ddd-celery generate job notifications SendReminders "
        '--cron "0 7 * * *" --time-zone Europe/Paris --command SendReminders',
    )
    _job_arguments(job)
    job.add_argument("--cron", help='five fields, such as "0 7 * * 1-5"')
    job.add_argument("--every", help="an interval: 500ms, 30s, 15m, 2h, 1d")
    job.add_argument("--time-zone", default="UTC", help="the IANA zone of --cron (default: UTC)")

    background_job = kinds.add_parser(
        "background-job", help="a @background job, its payload model, its command and its spec"
    )
    _job_arguments(background_job)

    worker = kinds.add_parser(
        "worker", help="the worker's entry point; RUN_JOBS off by default for the API"
    )
    worker.add_argument(
        "--app", help="module:attribute of the Celery app (default: <package>.app:app)"
    )
    _project_arguments(worker)
    return parser


def _job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("context", help="the context's package, such as notifications")
    parser.add_argument("job_class", metavar="JobClass", help="such as SendReminders")
    parser.add_argument(
        "--command", help="the command the job sends (default: the job class without Job)"
    )
    _project_arguments(parser)


def _project_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--project-root", default=".", help="the folder of pyproject.toml (default: here)"
    )
    parser.add_argument(
        "--package", help="the application's top package, when the root holds several"
    )


def console() -> None:
    """The entry point of the ``ddd-celery`` script."""
    sys.exit(main())
