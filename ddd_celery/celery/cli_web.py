"""``celery -A app jobs web``: the operator's page (``ddd_celery.web``) served alone.

On 127.0.0.1 by default, so only this machine reaches it until ``--host`` says otherwise.
With a token (``--token`` or ``DDD_CELERY_WEB_TOKEN``, the environment keeping it out of the
process list) a browser signs in once and may act, an API client sends it as ``Authorization:
Bearer``; without one the page is read-only. Needs the ``web`` extra.
"""

from __future__ import annotations

import logging
import os

import click

from ddd_celery.celery.cli_errors import JobsCommand
from ddd_celery.celery.guards import check_configuration
from ddd_celery.logs import FieldsFormatter

TOKEN_VARIABLE = "DDD_CELERY_WEB_TOKEN"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@click.command(name="web", cls=JobsCommand)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token",
    default=None,
    help=f"The token that signs in and lets act (default: ${TOKEN_VARIABLE}); none: read-only.",
)
@click.option(
    "--show-payloads",
    is_flag=True,
    help="Show payloads, checkpoints and process states (their shapes only by default).",
)
@click.option("--tenant", default=None, help="Show and act on this tenant's jobs only.")
@click.option(
    "--refresh",
    default=5,
    show_default=True,
    type=click.IntRange(min=0),
    help="Seconds between reloads of the pages of live state (0: never).",
)
@click.pass_context
def web_command(
    ctx: click.Context,
    /,
    *,
    host: str,
    port: int,
    token: str | None,
    show_payloads: bool,
    tenant: str | None,
    refresh: int,
) -> None:
    """Serve the page of the app's scheduled jobs, background jobs and process instances."""
    try:
        import uvicorn  # noqa: PLC0415

        from ddd_celery.web import create_app  # noqa: PLC0415
    except ImportError as missing:
        raise click.UsageError(
            f"the page needs the web extra ({missing.name} is missing): "
            'pip install "ddd-celery[web]"'
        ) from None
    token = token if token is not None else os.environ.get(TOKEN_VARIABLE) or None
    if tenant == "":
        raise click.BadParameter("'' names no tenant", param_hint="--tenant")
    check_configuration(ctx.obj.app)
    page = create_app(
        ctx.obj.app,
        token=token,
        viewer_tenant=tenant,
        show_payloads=show_payloads,
        refresh_seconds=refresh,
    )
    _log_actions()
    shown = f"[{host}]" if ":" in host else host
    how = (
        "sign in with the token to act" if token else f"read-only: no --token, no ${TOKEN_VARIABLE}"
    )
    click.echo(f"ddd_celery web: serving on http://{shown}:{port}/ ({how})")
    if token is None and host not in LOOPBACK:
        click.echo(
            f"ddd_celery web: {host} is reachable from other machines and the page has no token: "
            "anyone there sees every job (read-only)",
            err=True,
        )
    uvicorn.run(page, host=host, port=port, log_level="info", proxy_headers=False)


def _log_actions() -> None:
    """The page's actions at INFO on stderr, their fields after the message (who did what)."""
    logger = logging.getLogger("ddd_celery.web")
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(
        FieldsFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    )
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
