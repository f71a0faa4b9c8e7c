"""What every page shares: who the viewer is, the templates, the forms' checks, the answers.

A page's handler finds its viewer (``Web.viewer``: a sign-in asked for, or a refusal), reads the
stores in a worker thread (``run_in_threadpool``: the stores' clients block) through the
operations the CLI uses, and renders a template. Every text goes through ``printable`` before
the templates escape it (Jinja's ``finalize``), so a job name, an actor or an error type holding
markup or terminal escapes shows as text. Every action is a POST carrying the CSRF token,
confirmed on a page of its own before it is done, refused unless the viewer may act, and logged
at INFO with who did it (``ddd_celery.web``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ddd_celery.background.operations import json_text, printable
from ddd_celery.celery.cli_errors import why
from ddd_celery.kernel.instants import iso_ms
from ddd_celery.web.access import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Access,
    Viewer,
    new_csrf_cookie,
)

logger = logging.getLogger("ddd_celery.web")

CONFIRMED = "yes"
SECURITY_HEADERS = {
    # No script at all: the page refreshes itself with <meta http-equiv="refresh">.
    "content-security-policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class PageError(Exception):
    """A request the page answers with an error page: its status and what to tell."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SignInNeeded(Exception):
    """A browser with no sign-in on a page that asks for the token: sent to the form."""


@dataclass(frozen=True, slots=True)
class Settings:
    show_payloads: bool = False
    """Whether payloads, checkpoints and process states show their values (their shapes
    otherwise)."""
    refresh_seconds: int = 5
    """How often the pages that show live state reload themselves; 0: never."""
    page_size: int = 50


def _finalize(value: Any) -> Any:
    """Every value a template writes, its non-printable characters escaped (markup the page
    built itself, such as a chart, is left alone)."""
    if isinstance(value, Markup):
        return value
    if isinstance(value, str):
        return printable(value)
    if value is None:
        return "-"
    return value


def instant(at: datetime | None) -> str:
    return "-" if at is None else iso_ms(at)


DONE = {
    "paused": "Paused: every beat records its next occurrences skipped-paused.",
    "already-paused": "It was already paused; nothing changed.",
    "resumed": "Resumed: its next occurrence runs.",
    "not-paused": "It was not paused; nothing changed.",
    "sent": "Sent to the workers: its outcome shows in the history once a worker ran it.",
    "queued": "Queued behind the run in progress: the worker that ends that run sends it.",
    "cancel-done": "Cancelled.",
    "cancel-refused": "Not cancelled: it had finished meanwhile.",
    "cancel-not-found": "Not cancelled: it is gone.",
    "retried": "Queued again: beat's relay publishes it at its next tick.",
    "not-retried": "Not retried: it was no longer dead.",
}
_RETRIED = re.compile(r"retried-(\d+)-of-(\d+)")


def done_text(code: str) -> str:
    """What an action did, told from the code its redirect carries (never a text it quotes)."""
    if code in DONE:
        return DONE[code]
    many = _RETRIED.fullmatch(code)
    if many is not None:
        return f"Queued {many[1]} of {many[2]} again: beat's relay publishes them at its next tick."
    return "Done."


@dataclass
class Web:
    """The page of one Celery app: its access rules, settings and templates."""

    celery_app: Any
    access: Access
    settings: Settings
    templates: Environment = field(init=False)

    def __post_init__(self) -> None:
        self.templates = Environment(
            loader=PackageLoader("ddd_celery.web", "templates"),
            autoescape=True,
            finalize=_finalize,
            undefined=StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.templates.filters.update(
            instant=instant,
            json=json_text,
            why=why,
            done_text=done_text,
            reject_key=lambda given, key: {k: v for k, v in given.items() if k != key},
        )

    # --- who ----------------------------------------------------------------------------

    def viewer(self, request: Request) -> Viewer:
        """The request's viewer; a sign-in asked for (a browser) or a refusal (401, 403)."""
        viewer = self.access.viewer(request)
        if viewer is not None:
            return viewer
        if self.access.signs_in and self.access.authorize is None:
            if "authorization" in request.headers or wants_json(request):
                raise PageError(401, "this page asks for its token: Authorization: Bearer")
            raise SignInNeeded
        raise PageError(403, "you are not allowed to see this page")

    def actor(self, request: Request) -> Viewer:
        """The viewer of a request that acts: one who may act, whose form is the page's own
        (its CSRF token), unless authorized by its header."""
        viewer = self.viewer(request)
        if not viewer.may_act:
            raise PageError(403, "read-only: you may look, not act")
        return viewer

    async def form(self, request: Request) -> FormData:
        """The form of a POST, its CSRF token checked (403 without the right one)."""
        form = await request.form()
        if not self.access.by_header(request):
            token = form.get("csrf")
            if not isinstance(token, str) or not self.access.csrf_valid(request, token):
                raise PageError(403, "this form's CSRF token is missing or wrong: reload the page")
        return form

    # --- answers ------------------------------------------------------------------------

    def url(self, request: Request, path: str, **query: str | int | None) -> str:
        """``path`` under the page's mount point, with the query's given values."""
        root = request.scope.get("root_path", "").rstrip("/")
        given = {key: value for key, value in query.items() if value not in (None, "")}
        return f"{root}{path}" + (f"?{urlencode(given)}" if given else "")

    def render(
        self,
        request: Request,
        viewer: Viewer | None,
        template: str,
        model: Mapping[str, Any],
        *,
        status: int = 200,
        refresh: bool = False,
    ) -> Response:
        """The template with ``model``, and what every page shows (viewer, forms' token)."""
        cookie = request.cookies.get(CSRF_COOKIE)
        fresh = cookie is None
        if cookie is None:
            cookie = new_csrf_cookie()

        def url(path: str, **query: str | int | None) -> str:
            return self.url(request, path, **query)

        html = self.templates.get_template(template).render(
            **model,
            viewer=viewer,
            csrf=self.access.csrf_token(cookie),
            url=url,
            signs_in=self.access.signs_in and self.access.authorize is None,
            refresh=self.settings.refresh_seconds if refresh else 0,
            done=request.query_params.get("done"),
            here=_without_done(request),
        )
        response = HTMLResponse(html, status_code=status)
        if fresh:
            self.set_cookie(request, response, CSRF_COOKIE, cookie, max_age=None)
        return response

    def set_cookie(
        self, request: Request, response: Response, name: str, value: str, *, max_age: int | None
    ) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=request.scope.get("root_path", "") or "/",
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )

    def sign_in_cookie(self, request: Request, response: Response, name: str) -> None:
        self.set_cookie(
            request,
            response,
            SESSION_COOKIE,
            self.access.session_cookie(name),
            max_age=SESSION_SECONDS,
        )

    def redirect(self, request: Request, path: str, **query: str | int | None) -> Response:
        return RedirectResponse(self.url(request, path, **query), status_code=303)

    def acted(
        self,
        request: Request,
        viewer: Viewer,
        *,
        action: str,
        target: str,
        answer: str,
        back: Response,
        **details: object,
    ) -> Response:
        """Log the action at INFO with who did it, then answer: JSON to an API client, the
        page it came from (``back``) to a browser."""
        logger.info(
            "Operator action %s on %s by %s: %s",
            action,
            printable(target),
            printable(viewer.name),
            answer,
            extra={
                "action": action,
                "target": target,
                "by": viewer.name,
                "tenant_id": viewer.tenant_id,
                "answer": answer,
                **details,
            },
        )
        if wants_json(request) or self.access.by_header(request):
            return JSONResponse({"action": action, "target": target, "answer": answer, **details})
        return back

    def confirm(
        self,
        request: Request,
        viewer: Viewer,
        *,
        action: str,
        verb: str,
        title: str,
        what: list[str],
        fields: list[tuple[str, str]],
        back: str,
        warning: str | None = None,
    ) -> Response:
        """The page that asks before an action: what it does, the same form confirmed."""
        return self.render(
            request,
            viewer,
            "confirm.html",
            {
                "action": action,
                "verb": verb,
                "title": title,
                "what": what,
                "fields": fields,
                "back": back,
                "warning": warning,
                "confirmed": CONFIRMED,
            },
        )

    def error_page(self, request: Request, status: int, message: str) -> Response:
        if wants_json(request) or "authorization" in request.headers:
            return JSONResponse({"error": message}, status_code=status)
        viewer = None
        try:
            viewer = self.access.viewer(request)
        except Exception:  # the authorization itself failed: the page tells the error alone
            viewer = None
        return self.render(request, viewer, "error.html", {"message": message}, status=status)

    async def store_error(self, request: Request, error: Exception) -> Response:
        """A store that cannot be asked, or a configuration the page cannot run: one line."""
        return self.error_page(request, 503, f"a store could not be asked: {why(error)}")


def _without_done(request: Request) -> str:
    """The page's own address without the notice of an action (a reload shows it no more)."""
    query = [(key, value) for key, value in request.query_params.multi_items() if key != "done"]
    return request.url.path + (f"?{urlencode(query)}" if query else "")


def wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def json_response(document: Any, status: int = 200) -> Response:
    """``document`` as the CLI's ``--json`` writes it: printable ASCII, whatever it holds."""
    return Response(json_text(document), status_code=status, media_type="application/json")


class SecurityHeaders:
    """Adds ``SECURITY_HEADERS`` to every response of the page (no script, no framing)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
