"""The process instances: found by their key, listed where the store can list them.

The ``ProcessStore`` port loads an instance by its key (tenant, process, id); it has no listing,
so the page finds an instance by the key an operator gives (every store), and lists instances
only for a store that has a ``list()`` of its own (``InMemoryProcessStore``), a bounded number
of them. An instance shows its version, its state (its shape unless ``show_payloads``) and its
armed timeouts, each with the background job that fires it and that job's state. A viewer
limited to a tenant reaches that tenant's instances only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ddd_celery.background.operations import json_text, payload_shape
from ddd_celery.background.store import JobState
from ddd_celery.celery.processes import ProcessManagers, process_managers_of
from ddd_celery.processes.store import StoredProcess
from ddd_celery.web.access import Viewer
from ddd_celery.web.core import PageError, Web

LISTED = 100
"""The most instances the page lists from a store that can list them."""


@dataclass(frozen=True, slots=True)
class Timeout:
    name: str
    job_id: str
    state: JobState | None
    """The state of the job that fires it; None when the job is not found."""


class ProcessPages:
    def __init__(self, web: Web) -> None:
        self.web = web

    def routes(self) -> list[Route]:
        return [
            Route("/processes", self.list_page, name="processes"),
            Route("/processes/instance", self.instance_page, name="process-instance"),
        ]

    def managers(self) -> ProcessManagers | None:
        try:
            return process_managers_of(self.web.celery_app)
        except LookupError:
            return None

    async def list_page(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        managers = self.managers()
        if managers is None:
            return self.web.render(request, viewer, "processes.html", {"installed": False})
        lister = _lister(managers)

        def read() -> list[StoredProcess] | None:
            if lister is None:
                return None
            found = [
                instance
                for instance in lister()
                if viewer.tenant_id is None or instance.tenant_id == viewer.tenant_id
            ]
            return found[:LISTED]

        listed = await run_in_threadpool(read)
        model = {
            "installed": True,
            "names": sorted(managers.managers),
            "store": type(managers.store).__name__,
            "listed": listed,
            "limit": LISTED,
        }
        return self.web.render(request, viewer, "processes.html", model)

    async def instance_page(self, request: Request) -> Response:
        viewer = self.web.viewer(request)
        managers = self.managers()
        if managers is None:
            raise PageError(404, "no process manager is installed on this app")
        query = request.query_params
        process, instance_id = query.get("process", ""), query.get("id", "").strip()
        tenant = _tenant(viewer, query.get("tenant", "").strip() or None)
        if process not in managers.managers:
            raise PageError(404, f"no process manager is named {process!r}")
        if not instance_id:
            raise PageError(400, "give the instance's id")

        def read() -> tuple[StoredProcess | None, list[Timeout]]:
            try:
                instance = managers.store.load(process, instance_id, tenant_id=tenant)
            except ValueError as refused:
                raise PageError(400, str(refused)) from None
            if instance is None:
                return None, []
            store, clock = managers.background.store, managers.background.clock
            now = clock.now()
            timeouts = []
            for name, job_id in sorted(instance.timeouts.items()):
                job = store.find(job_id, tenant_id=tenant)
                timeouts.append(Timeout(name, job_id, None if job is None else job.state(now)))
            return instance, timeouts

        instance, timeouts = await run_in_threadpool(read)
        if instance is None:
            whose = "" if tenant is None else f" of tenant {tenant!r}"
            raise PageError(404, f"no instance {instance_id!r} of {process!r}{whose}")
        state = (
            json_text(instance.state)
            if self.web.settings.show_payloads
            else payload_shape(instance.state)
        )
        model = {"instance": instance, "timeouts": timeouts, "state": state}
        return self.web.render(request, viewer, "process_instance.html", model, refresh=True)


def _tenant(viewer: Viewer, asked: str | None) -> str | None:
    if viewer.tenant_id is None:
        return asked
    if asked is not None and asked != viewer.tenant_id:
        raise PageError(403, "you see the instances of your own tenant only")
    return viewer.tenant_id


def _lister(managers: ProcessManagers) -> Callable[[], Sequence[StoredProcess]] | None:
    """The store's own ``list()``, when it has one (it is no part of the port)."""
    lister: Any = getattr(managers.store, "list", None)
    return lister if callable(lister) else None
