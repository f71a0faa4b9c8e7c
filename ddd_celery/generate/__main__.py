"""``python -m ddd_celery.generate``: the ``ddd-celery`` script without its entry point."""

from ddd_celery.generate.cli import console

console()
