"""The operator's page: see and act on the scheduled jobs, background jobs and process
instances of a Celery app, in a browser (the ``web`` extra: Starlette, Jinja2, uvicorn).

``create_app(celery_app, ...)`` is an ASGI application to mount in the application's own
(``authorize`` says who may see and act) or to serve alone (``celery -A app jobs web``, with a
token). It reads and acts through the queries and commands ``celery jobs`` runs
(``ddd_celery.background.operations``, ``ddd_celery.celery.views``), so the page and the CLI
never disagree.
"""

from ddd_celery.web.access import Viewer
from ddd_celery.web.app import create_app

__all__ = ["Viewer", "create_app"]
