"""``create_app``: the operator's page of a Celery app, as an ASGI application.

Mount it in the application's own (FastAPI, Starlette, Django's ASGI) with ``authorize`` saying
who may see and act, or serve it alone with ``celery -A app jobs web`` and a token.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ddd_celery.celery.cli_errors import STORE_ERRORS
from ddd_celery.web.access import SESSION_COOKIE, Access, Authorize, Signer, derived_key
from ddd_celery.web.background import BackgroundPages
from ddd_celery.web.core import PageError, SecurityHeaders, Settings, SignInNeeded, Web
from ddd_celery.web.processes import ProcessPages
from ddd_celery.web.scheduled import ScheduledPages


def create_app(
    celery_app: Any,
    *,
    authorize: Authorize | None = None,
    token: str | None = None,
    viewer_tenant: str | None = None,
    show_payloads: bool = False,
    secret: str | bytes | None = None,
    refresh_seconds: int = 5,
    page_size: int = 50,
) -> Starlette:
    """The page of ``celery_app``'s jobs (what ``install_jobs``, ``install_background_jobs`` and
    ``install_process_managers`` wired on it), as a Starlette application to mount or serve.

    - ``authorize(request) -> Viewer | None``: the application says who the request is
      (``Viewer(name, may_act, tenant_id)``), None to refuse it (403). Without it and without a
      token, every request sees the page read-only.
    - ``token``: the standalone server's; a browser signs in with it on a form (a signed
      cookie, HttpOnly, SameSite=Strict, for 12 hours), an API client sends it as
      ``Authorization: Bearer <token>``. Either may act. Not with ``authorize``.
    - ``viewer_tenant``: every viewer sees and acts on that tenant's jobs only.
    - ``show_payloads``: show payloads, checkpoints and process states (their shapes only by
      default: they are the application's data).
    - ``secret``: the key of the cookies and the forms' CSRF tokens; give one when several
      processes serve the page behind one address (by default it comes from the token, or is
      random to this process).
    - ``refresh_seconds``: how often pages of live state reload themselves (0: never);
      ``page_size``: the jobs on a page.

    Reads the stores only when a page is asked for.
    """
    if authorize is not None and token is not None:
        raise ValueError("give authorize (mounted in an app) or token (served alone), not both")
    if token == "":
        raise ValueError("an empty token lets anyone act: give a token, or none (read-only)")
    if viewer_tenant == "":
        raise ValueError("viewer_tenant is a tenant's id, or None for every tenant")
    if refresh_seconds < 0 or page_size < 1:
        raise ValueError("refresh_seconds is 0 or more, page_size 1 or more")
    access = Access(
        Signer(derived_key(token, secret)),
        authorize=authorize,
        token=token,
        tenant_id=viewer_tenant,
    )
    web = Web(celery_app, access, Settings(show_payloads, refresh_seconds, page_size))
    scheduled, background, processes = ScheduledPages(web), BackgroundPages(web), ProcessPages(web)

    async def dashboard(request: Request) -> Response:
        viewer = web.viewer(request)

        def read() -> dict[str, Any]:
            model: dict[str, Any] = {"scheduled": None, "background": None}
            registry = scheduled.registry()
            if registry is not None and viewer.tenant_id is None:
                model["scheduled"] = scheduled.summary(registry, registry.clock.now())
            jobs = background.registry()
            if jobs is not None:
                model["background"] = background.summary(jobs, viewer)
            model["processes"] = processes.managers() is not None
            return model

        model = await run_in_threadpool(read)
        return web.render(request, viewer, "dashboard.html", model, refresh=True)

    async def sign_in_form(request: Request) -> Response:
        if not access.signs_in:
            return web.redirect(request, "/")
        return web.render(request, None, "signin.html", {"next": _next(request), "wrong": False})

    async def sign_in(request: Request) -> Response:
        if not access.signs_in:
            raise PageError(404, "this page has no sign-in: it is read-only, or its application's")
        form = await web.form(request)
        given, name = str(form.get("token", "")), str(form.get("name", "")).strip()
        target = _next(request, str(form.get("next", "")))
        if not given or not access.token_matches(given):
            model = {"next": target, "wrong": True}
            return web.render(request, None, "signin.html", model, status=403)
        response = web.redirect(request, target)
        web.sign_in_cookie(request, response, name or "operator")
        return response

    async def sign_out(request: Request) -> Response:
        await web.form(request)
        response = web.redirect(request, "/signin" if access.signs_in else "/")
        response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path", "") or "/")
        return response

    async def page_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, PageError)
        return web.error_page(request, error.status, error.message)

    async def to_sign_in(request: Request, error: Exception) -> Response:
        path = request.url.path
        query = f"?{request.url.query}" if request.url.query else ""
        return web.redirect(request, "/signin", next=f"{path}{query}")

    routes = [
        Route("/", dashboard, name="dashboard"),
        Route("/signin", sign_in_form, methods=["GET"]),
        Route("/signin", sign_in, methods=["POST"]),
        Route("/signout", sign_out, methods=["POST"]),
        *scheduled.routes(),
        *background.routes(),
        *processes.routes(),
    ]
    handlers: dict[Any, Any] = {PageError: page_error, SignInNeeded: to_sign_in}
    for fault in STORE_ERRORS:
        handlers[fault] = web.store_error
    return Starlette(
        routes=routes, middleware=[Middleware(SecurityHeaders)], exception_handlers=handlers
    )


def _next(request: Request, given: str | None = None) -> str:
    """Where a sign-in goes back to: a path of this page only, never another site."""
    target = given if given is not None else request.query_params.get("next", "")
    root = request.scope.get("root_path", "").rstrip("/")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    if root and target.startswith(root):
        target = target[len(root) :] or "/"
    return target
