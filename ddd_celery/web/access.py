"""Who sees the page and who may act on it: viewers, the sign-in cookie, the CSRF tokens.

Three ways in, one answer (a ``Viewer``, or none):

- mounted in an application, ``authorize(request)`` is the application's: it knows its users;
  it returns None for a request it does not let see the page (403);
- served alone with a token, a browser signs in once on a form, which sets a signed cookie
  (HttpOnly, SameSite=Strict), and an API client sends ``Authorization: Bearer <token>``;
- with neither, every request sees the page read-only.

Every form that acts carries a CSRF token bound to a cookie of its own (a signed double
submit): a page of another site can make the browser post, never read the token. A request
authorized by its ``Authorization`` header carries no cookie a forged post could ride on, so it
needs none.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request

SESSION_COOKIE = "ddd_celery_session"
CSRF_COOKIE = "ddd_celery_csrf"
SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts: an operator's working day, then the token is asked again."""
ANONYMOUS = "anonymous"
BEARER = "api client (bearer token)"


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who looks at the page: a name for the log of actions, whether they may act, and the
    one tenant whose jobs they reach (None: every tenant's, an operator)."""

    name: str
    may_act: bool = False
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        if self.tenant_id == "":
            raise ValueError("a viewer's tenant is None (every tenant) or a tenant's id, not ''")


Authorize = Callable[[Request], Viewer | None]
"""The application's answer for a request: its viewer, or None to refuse it."""


class Signer:
    """HMAC-SHA256 signatures under a key of the page's own (``secret``, or one derived from the
    token so a new token ends every sign-in)."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    def sign(self, purpose: str, value: str) -> str:
        mac = hmac.new(self._key, f"{purpose}\x00{value}".encode(), hashlib.sha256)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def verify(self, purpose: str, value: str, signature: str) -> bool:
        return hmac.compare_digest(self.sign(purpose, value), signature)

    def seal(self, document: dict[str, object]) -> str:
        """``document`` as ``<base64 JSON>.<signature>``: readable, not forgeable."""
        body = base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")
        return f"{body}.{self.sign('session', body)}"

    def open(self, sealed: str) -> dict[str, object] | None:
        """The document ``seal`` wrote, None for anything else (forged, damaged, another key)."""
        body, _, signature = sealed.partition(".")
        if not body or not self.verify("session", body, signature):
            return None
        try:
            document = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except ValueError:
            return None
        return document if isinstance(document, dict) else None


@dataclass(frozen=True, slots=True)
class Access:
    """How the page tells who a request comes from (one of the three ways in)."""

    signer: Signer
    authorize: Authorize | None = None
    token: str | None = None
    tenant_id: str | None = None
    """The tenant every viewer is limited to (``create_app(viewer_tenant=...)``)."""

    @property
    def signs_in(self) -> bool:
        """Whether the page has a sign-in form (a token is given)."""
        return self.token is not None

    def viewer(self, request: Request) -> Viewer | None:
        """The viewer of ``request``, limited to the page's tenant; None: not let in."""
        viewer = self._viewer(request)
        if viewer is None or self.tenant_id is None:
            return viewer
        if viewer.tenant_id is None:
            return Viewer(viewer.name, viewer.may_act, self.tenant_id)
        return viewer if viewer.tenant_id == self.tenant_id else None

    def by_header(self, request: Request) -> bool:
        """Whether ``request`` is authorized by its ``Authorization`` header (no cookie)."""
        return self.token is not None and self._bearer(request) is not None

    def _viewer(self, request: Request) -> Viewer | None:
        if self.authorize is not None:
            return self.authorize(request)
        if self.token is None:
            return Viewer(ANONYMOUS)
        bearer = self._bearer(request)
        if bearer is not None:
            return Viewer(BEARER, may_act=True) if self.token_matches(bearer) else None
        session = self.signer.open(request.cookies.get(SESSION_COOKIE, ""))
        if session is None:
            return None
        name, signed_at = session.get("name"), session.get("at")
        if not isinstance(name, str) or not isinstance(signed_at, int):
            return None
        if not 0 <= time.time() - signed_at < SESSION_SECONDS:
            return None
        return Viewer(name, may_act=True)

    def token_matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def session_cookie(self, name: str) -> str:
        """The value of the sign-in cookie of ``name``, signed now."""
        return self.signer.seal({"name": name, "at": int(time.time())})

    @staticmethod
    def _bearer(request: Request) -> str | None:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        return given.strip() if scheme.lower() == "bearer" and given.strip() else None

    # --- CSRF ----------------------------------------------------------------------------

    def csrf_token(self, cookie: str) -> str:
        """The token a form carries for the browser holding the CSRF cookie ``cookie``."""
        return self.signer.sign("csrf", cookie)

    def csrf_valid(self, request: Request, given: str | None) -> bool:
        """Whether a form's ``given`` token is the one of the request's CSRF cookie."""
        cookie = request.cookies.get(CSRF_COOKIE)
        if not cookie or not given:
            return False
        return self.signer.verify("csrf", cookie, given)


def new_csrf_cookie() -> str:
    return secrets.token_urlsafe(32)


def derived_key(token: str | None, secret: str | bytes | None) -> bytes:
    """The key of the signatures: ``secret`` when given (several processes behind one address
    share it), else derived from the token, else random (one process, sign-ins and forms of
    this process only)."""
    if secret is not None:
        given = secret.encode() if isinstance(secret, str) else secret
        return hashlib.sha256(b"ddd_celery.web\x00" + given).digest()
    if token is not None:
        return hashlib.sha256(b"ddd_celery.web token\x00" + token.encode()).digest()
    return secrets.token_bytes(32)
