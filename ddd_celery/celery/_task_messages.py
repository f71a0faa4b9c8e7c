"""A task's message as Celery's ``send_task`` builds it, its fixed part computed once per task.

``send_task`` recomputes for every message what does not change from one message of a task to
the next: the task's own options, the route (``task_routes``, ``task_queues``, the queue's
exchange, routing key and declaration), the serializer, the delivery mode, the retry policy and
most of the protocol 2 headers: most of the CPU of a message published in a batch (the figure is
in docs/benchmarks.md, "What the private rebuilds save"). ``TaskMessage`` does that once, then
each message fills only what is its own (its id, its kwargs, its expiry, the trace headers) and
goes to the producer's ``publish`` as ``send_task`` would hand it over: same headers,
properties, body, exchange and routing key, the ``before_task_publish`` and
``after_task_publish`` signals sent with the same arguments when they have receivers.

The message copied is Celery 5.7's. On a Celery whose ``send_task`` writes another (5.4 to 5.6:
no ``task_repr_maxlevels``, no task options merged by ``send_task``, no callback publish retried
apart), ``PREBUILT`` is false, read once at import: every message goes through ``send_task``.

Only what always gives the same message takes this path (``TaskMessage.of`` answers None
otherwise, and the caller uses ``send_task``): an app whose ``send_task`` or task message code is
Celery's own (a wrapped one, a test's double, is used as it is), protocol 2, no ``task-sent``
events, routes that name tasks (a router function may route each message apart), and, at each
message, no task running in this thread (its message would carry the parent's ids).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from celery._state import get_current_worker_task
from celery.app import amqp as celery_amqp
from celery.app import base as celery_base
from celery.app import defaults as celery_defaults
from celery.app.routes import MapRoute
from celery.backends.base import Backend
from celery.signals import after_task_publish, before_task_publish, task_sent
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu import exceptions as kombu_exceptions
from kombu.common import Broadcast
from kombu.entity import Queue
from kombu.transport import redis as kombu_redis
from kombu.utils import json as kombu_json
from kombu.utils.uuid import uuid

from ddd_celery.kernel.ids import UuidGenerator

_celery_logger = logging.getLogger(celery_base.__name__)

BatchPublishError: type[Exception] = getattr(
    kombu_exceptions, "BatchPublishError", kombu_exceptions.KombuError
)
"""What a failed publish batch raises: kombu's own error, or (kombu before 5.7, which has no
publish batch) its base."""


def _sends_the_message_copied() -> bool:
    """Whether this Celery's ``send_task`` writes the message ``TaskMessage`` copies (5.7's).

    Told by what that message needs, not by a version: the ``task_repr_maxlevels`` setting of
    its reprs, ``send_task`` merging the registered task's own options, and the context that
    retries a callback's publish on its own.
    """
    return (
        "task_repr_maxlevels" in celery_defaults.DEFAULTS
        and "_get_exec_options" in celery_base.Celery.send_task.__code__.co_names
        and hasattr(celery_amqp, "_callback_publish_retry")
    )


PREBUILT = _sends_the_message_copied()
"""The one switch: False sends every message through ``send_task``, Celery's own path."""

_SEND_TASK_MESSAGE_ARGUMENTS = frozenset(
    {
        "exchange",
        "routing_key",
        "queue",
        "event_dispatcher",
        "retry",
        "retry_policy",
        "serializer",
        "delivery_mode",
        "compression",
        "declare",
        "headers",
        "exchange_type",
        "timeout",
        "confirm_timeout",
    }
)
"""The options Celery's ``send_task_message`` takes by name; the others become properties."""


TASK_IDS = UuidGenerator()
"""Task ids and delivery tags, as kombu's ``uuid()`` makes them (version 4 UUIDs), many at once."""

_SLOT = "<per message>"
"""Holds a header's place in the template, so each message keeps Celery's order of keys."""


def new_task_id() -> str:
    """A task id as Celery makes one."""
    return uuid()


def _is_celerys(function: Any, module: Any, name: str) -> bool:
    """Whether ``function`` is the one Celery defines in ``module``, not a wrapper or a double."""
    code = getattr(function, "__code__", None)
    return code is not None and code.co_name == name and code.co_filename == module.__file__


def _reprs_alike(text: str) -> bool:
    return text.isprintable() and "'" not in text and "\\" not in text


_origin: list[str] = []
"""This process's node name, as Celery's ``origin`` header gives it; forgotten in a child."""
os.register_at_fork(after_in_child=_origin.clear)


_last_expiry: list[tuple[datetime | None, str]] = [(None, "")]
"""The last expiry written and its text: the messages beat publishes together share one."""


def _isoformat(expires: datetime) -> str:
    """``expires.isoformat()``, once per expiry object (the same object, so the same text)."""
    last = _last_expiry[0]
    if last[0] is expires:
        return last[1]
    text = expires.isoformat()
    _last_expiry[0] = (expires, text)
    return text


EXPIRY_FIELDS = ("expires", "expiration")
"""The header and the property that carry a message's expiry."""


def expiry(task_id: str, expires: datetime) -> tuple[str, float]:
    """A message's ``expires`` header and its TTL in seconds, as ``send_task`` gives them to
    kombu: a TTL of 0, with Celery's warning, when the expiry is past."""
    seconds = (expires - datetime.now(UTC)).total_seconds()
    if seconds < 0:
        _celery_logger.warning(
            f"{task_id} has an expiration date in the past ({-seconds}s ago).\n"
            "We assume this is intended and so we have set the "
            "expiration date to 0 instead.\n"
            "According to RabbitMQ's documentation:\n"
            '"Setting the TTL to 0 causes messages to be expired upon '
            "reaching a queue unless they can be delivered to a "
            'consumer immediately."\n'
            "If this was unintended, please check the code which "
            "published this task."
        )
        seconds = 0
    return _isoformat(expires), seconds


def kwargs_repr(kwargs: Mapping[str, Any], limits: tuple[int, int]) -> str:
    """What Celery's ``saferepr`` writes of ``kwargs`` within ``limits`` (size, levels):
    ``repr`` where that is the same.

    ``saferepr`` quotes a string as ``repr`` does unless it holds a quote, a backslash or a
    character ``repr`` escapes, and cuts nothing shorter than its limit.
    """
    if all(
        type(key) is str
        and _reprs_alike(key)
        and (value is None or (type(value) is str and _reprs_alike(value)))
        for key, value in kwargs.items()
    ):
        text = repr(kwargs)
        if len(text) < limits[0]:
            return text
    maxsize, maxlevels = limits
    return str(saferepr(kwargs, maxsize, maxlevels=maxlevels))


def _origin_here() -> str:
    if not _origin:
        _origin.append(str(anon_nodename()))
    return _origin[0]


class _AppSending:
    """What ``send_task`` reads of an app's configuration for every message, read once.

    Celery's own ``send_task_message`` reads the same settings once too, when it is made.
    """

    __slots__ = (
        "amqp",
        "backend_calls",
        "compression",
        "default_delivery_mode",
        "default_routing_key",
        "repr_limits",
        "retry",
        "retry_policy",
        "router",
        "serializer",
    )

    def __init__(self, app: Any) -> None:
        conf, amqp = app.conf, app.amqp
        self.amqp, self.router = amqp, amqp.router
        self.retry = conf.task_publish_retry
        self.retry_policy = dict(conf.task_publish_retry_policy)
        self.serializer, self.compression = conf.task_serializer, conf.task_compression
        self.default_delivery_mode = conf.task_default_delivery_mode
        self.default_routing_key = conf.task_default_routing_key
        self.repr_limits = (amqp.kwargsrepr_maxsize, conf.task_repr_maxlevels)
        self.backend_calls = type(app.backend).on_task_call is not Backend.on_task_call

    @staticmethod
    def of(app: Any) -> _AppSending | None:
        """The app's, built once (again when its routes change); None if ``send_task`` sends."""
        router = app.amqp.router
        built = getattr(app, _SENDING, None)
        if built is None or built[0] is not router:
            conf = app.conf
            usable = (
                conf.task_protocol == 2
                and not conf.task_send_sent_event
                and not conf.task_always_eager
                and _runs_celerys_own_send(app)
                and all(isinstance(route, MapRoute) for route in router.routes)
            )
            built = (router, _AppSending(app) if usable else None)
            setattr(app, _SENDING, built)
        return built[1]


_SENDING = "_ddd_celery_sending"
"""Where an app keeps its ``_AppSending``, with the router it was read with: on the app, so a
cache never outlives it (it refers to the app)."""


def _runs_celerys_own_send(app: Any) -> bool:
    amqp = app.amqp
    return (
        _is_celerys(getattr(app.send_task, "__func__", None), celery_base, "send_task")
        and _is_celerys(
            getattr(amqp.create_task_message, "__func__", None), celery_amqp, "as_task_v2"
        )
        and _is_celerys(amqp.send_task_message, celery_amqp, "send_task_message")
    )


class TaskMessage:
    """The messages of one task to one destination, as ``send_task`` would publish them.

    Built by ``of`` for the options a caller would give ``send_task``: ``queue``, JSON, and
    ``expires`` given with each message (beat) or never (the task's own ``expires`` then
    applies: such a task is left to ``send_task``). ``reprs_given``: the caller gives
    ``argsrepr`` and ``kwargsrepr`` as options, which Celery also carries as properties.
    """

    __slots__ = (
        "_app",
        "_cached_declaration",
        "_calls_backend",
        "_compression",
        "_confirm_timeout",
        "_declare",
        "_delivery_mode",
        "_exchange",
        "_headers",
        "_name",
        "_properties",
        "_repr_limits",
        "_reprs_given",
        "_retry",
        "_retry_policy",
        "_routing_key",
        "_sending",
        "_serializer",
        "_timelimit",
        "_timeout",
    )

    def __init__(
        self,
        app: Any,
        sending: _AppSending,
        name: str,
        options: dict[str, Any],
        *,
        time_limits: tuple[Any, Any],
        ignore_result: Any,
        reprs_given: bool,
    ) -> None:
        """Carry out, once, what ``send_task`` and ``send_task_message`` do with ``options``."""
        amqp = sending.amqp
        self._app, self._sending, self._name, self._reprs_given = app, sending, name, reprs_given
        named = {
            key: options.pop(key) for key in list(options) if key in _SEND_TASK_MESSAGE_ARGUMENTS
        }
        self._properties = options  # what send_task_message puts in the message's properties
        exchange, routing_key = named.get("exchange"), named.get("routing_key")
        queue: Any = named.get("queue")
        qname = queue
        if queue is None and exchange is None:
            queue = amqp.default_queue
        if queue is not None:
            if isinstance(queue, str):
                qname, queue = queue, amqp.queues[queue]
            else:
                qname = queue.name
        delivery_mode = named.get("delivery_mode")
        if delivery_mode is None:
            delivery_mode = getattr(getattr(queue, "exchange", None), "delivery_mode", None)
            delivery_mode = delivery_mode or sending.default_delivery_mode
        exchange_type = named.get("exchange_type")
        if exchange_type is None:
            exchange_type = getattr(getattr(queue, "exchange", None), "type", None) or "direct"
        if (not exchange or not routing_key) and exchange_type == "direct":
            exchange, routing_key = "", qname
        elif exchange is None:
            exchange = queue.exchange.name or amqp.default_exchange
            routing_key = routing_key or queue.routing_key or sending.default_routing_key
        declare = named.get("declare")
        if declare is None and queue and not isinstance(queue, Broadcast):
            declare = [queue]
        self._declare: list[Any] = list(declare or [])
        only = self._declare[0] if len(self._declare) == 1 else None
        self._cached_declaration = (
            hash(only)
            if isinstance(only, Queue) and only.name and only.can_cache_declaration
            else None
        )
        self._exchange, self._routing_key = exchange, routing_key
        self._delivery_mode = delivery_mode
        retry, retry_policy = named.get("retry"), named.get("retry_policy")
        self._retry = sending.retry if retry is None else retry
        self._retry_policy = (
            dict(sending.retry_policy, **retry_policy) if retry_policy else sending.retry_policy
        )
        self._serializer = named.get("serializer") or sending.serializer
        self._compression = named.get("compression") or sending.compression
        self._timeout, self._confirm_timeout = named.get("timeout"), named.get("confirm_timeout")
        self._timelimit = time_limits
        self._headers = {
            "lang": "py",
            "task": name,
            "id": _SLOT,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": _SLOT,
            "root_id": _SLOT,
            "parent_id": None,
            "argsrepr": "()",
            "kwargsrepr": _SLOT,
            "origin": _SLOT,
            "ignore_result": ignore_result,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": _SLOT,
        }
        self._repr_limits = sending.repr_limits
        self._calls_backend = not ignore_result and sending.backend_calls

    @classmethod
    def of(
        cls,
        app: Any,
        name: str,
        *,
        queue: str | None,
        expires_given: bool = True,
        reprs_given: bool = False,
    ) -> TaskMessage | None:
        """The messages ``send_task(name, kwargs=..., queue=queue, serializer="json")`` sends.

        None when this app or task cannot be sent this way: use ``send_task``. Raises what
        ``send_task`` would raise for every message (a queue missing from ``task_queues``).
        """
        if not PREBUILT:
            return None
        sending = _AppSending.of(app)
        if sending is None:
            return None
        options: dict[str, Any] = {"queue": queue, "serializer": "json"}
        if reprs_given:
            options.update(argsrepr="()", kwargsrepr=_SLOT)
        # As send_task: the registered task's own options, under the caller's.
        task_type = app._tasks.get(name)
        get_exec_options = getattr(task_type, "_get_exec_options", None)
        if get_exec_options is not None and hasattr(get_exec_options, "__self__"):
            own = {key: value for key, value in get_exec_options().items() if value is not None}
            options = dict(own, **options)
        time_limits = (options.pop("time_limit", None), options.pop("soft_time_limit", None))
        if options.pop("expires", None) is not None and not expires_given:
            return None
        ignore_result = options.pop("ignore_result", None)
        options = sending.router.route(options, name, (), {}, task_type)
        if "headers" in options or "stamped_headers" in options or "expiration" in options:
            return None  # a route that sets these: send_task merges them message by message
        return cls(
            app,
            sending,
            name,
            options,
            time_limits=time_limits,
            ignore_result=ignore_result,
            reprs_given=reprs_given,
        )

    def is_current(self) -> bool:
        """False once the app's routes changed since it was built: build it again."""
        return self._sending.router is self._app.amqp.router

    @staticmethod
    def fits_here() -> bool:
        """False within a running task (its message would carry the parent's ids): send_task.

        The same for every message of a task: a caller publishing many asks once.
        """
        return (
            PREBUILT
            and get_current_worker_task() is None
            and not celery_amqp._callback_publish_retry.get()
        )

    def send(
        self,
        producer: Any,
        task_id: str,
        kwargs: dict[str, Any],
        *,
        headers: Mapping[str, Any] | None = None,
        expires: datetime | None = None,
        kwargsrepr: str | None = None,
    ) -> None:
        """Publish one message through ``producer`` (in its publish batch, if one is open).

        Raises what ``send_task`` raises: kombu's ``OperationalError`` for a broker that cannot
        be reached.
        """
        parts = self._parts(
            task_id, kwargs, headers=headers, expires=expires, kwargsrepr=kwargsrepr
        )
        self._publish(producer, task_id, kwargs, parts)

    def _parts(
        self,
        task_id: str,
        kwargs: dict[str, Any],
        *,
        headers: Mapping[str, Any] | None,
        expires: datetime | None,
        kwargsrepr: str | None,
    ) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
        """The body, headers and properties of one message, as ``send_task`` writes them."""
        if kwargsrepr is None:
            kwargsrepr = kwargs_repr(kwargs, self._repr_limits)
        message_headers = self._headers.copy()
        message_headers["id"] = message_headers["root_id"] = task_id
        message_headers["timelimit"] = list(self._timelimit)
        message_headers["kwargsrepr"] = kwargsrepr
        message_headers["origin"] = _origin_here()
        message_headers["stamps"] = {}
        properties = {"correlation_id": task_id, "reply_to": self._app.thread_oid}
        properties.update(self._properties)
        if self._reprs_given:
            properties["kwargsrepr"] = kwargsrepr
        if expires is not None:
            message_headers["expires"], properties["expiration"] = expiry(task_id, expires)
        if headers:
            message_headers.update(headers)
        body = ((), kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
        return body, message_headers, properties

    def _publish(
        self,
        producer: Any,
        task_id: str,
        kwargs: dict[str, Any],
        parts: tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]],
    ) -> None:
        """Hand one message (its body, headers and properties: ``parts``) to
        ``producer.publish`` as ``send_task_message`` does, with its signals."""
        body, message_headers, properties = parts
        retry_policy = dict(self._retry_policy)
        name, exchange, routing_key = self._name, self._exchange, self._routing_key
        connection = producer.connection
        with connection._reraise_as_library_errors():
            declare = self._declaration(connection)
            if self._calls_backend:
                self._app.backend.on_task_call(producer, task_id)
            if before_task_publish.receivers:
                before_task_publish.send(
                    sender=name,
                    body=body,
                    exchange=exchange,
                    routing_key=routing_key,
                    declare=declare,
                    headers=message_headers,
                    properties=properties,
                    retry_policy=retry_policy,
                )
            producer.publish(
                body,
                exchange=exchange,
                routing_key=routing_key,
                serializer=self._serializer,
                compression=self._compression,
                retry=self._retry,
                retry_policy=retry_policy,
                delivery_mode=self._delivery_mode,
                declare=declare,
                headers=message_headers,
                timeout=self._timeout,
                confirm_timeout=self._confirm_timeout,
                **properties,
            )
            if after_task_publish.receivers:
                after_task_publish.send(
                    sender=name,
                    body=body,
                    headers=message_headers,
                    exchange=exchange,
                    routing_key=routing_key,
                )
            if task_sent.receivers:  # Celery's deprecated signal, sent as send_task sends it
                task_sent.send(
                    sender=name,
                    task_id=task_id,
                    task=name,
                    args=body[0],
                    kwargs=kwargs,
                    eta=None,
                    taskset=None,
                )

    def on_redis(
        self,
        producer: Any,
        kwargs: Sequence[str],
        headers: Sequence[str],
        *,
        expires: bool = False,
    ) -> RedisMessages | None:
        """This task's messages as kombu's Redis transport writes them through ``producer``,
        their ``kwargs`` and ``headers`` (those named) and ids filled in for each, and with
        ``expires`` their expiry (the ``expires`` header, the ``expiration`` property: what
        ``expiry`` gives, the TTL in ms as kombu writes it): ``RedisMessages``. None where a
        message must go through ``send`` (another transport, a route through an exchange, a
        queue with an expiry, a pipeline Redis may replay, publish signals with receivers, a
        result backend told of each task).

        The template is one message carried through kombu's own code, the producer's publish
        and the channel's preparation, with a marker in each field that differs, held back
        before it is sent. The queue is declared, as the first message of ``send`` declares it.
        """
        channel = producer.channel
        if (
            not isinstance(channel, kombu_redis.Channel)
            or not channel.supports_batch_publish
            or self._calls_backend
            or before_task_publish.receivers
            or after_task_publish.receivers
            or task_sent.receivers
            or not hasattr(producer, "_batch_local")
        ):
            return None
        markers = {
            name: f"\x00{uuid()}\x00"
            for name in ("id", "kwargsrepr", *kwargs, *headers, *EXPIRY_FIELDS)
        }
        marked = {name: markers[name] for name in kwargs}
        parts = self._parts(
            markers["id"],
            marked,
            headers={name: markers[name] for name in headers},
            expires=None,
            kwargsrepr=markers["kwargsrepr"],
        )
        if expires:
            parts[1]["expires"] = markers["expires"]
            parts[2]["expiration"] = 0  # in its place; its text is kombu's, marked below
        held = _HeldBack()
        local = producer._batch_local
        before = getattr(local, "current", _ABSENT)
        local.current = held
        try:
            self._publish(producer, markers["id"], marked, parts)
        finally:
            if before is _ABSENT:
                del local.current
            else:
                local.current = before
        redis_channel: Any = channel  # kombu's, untyped
        message, exchange, queue = held.message, held.exchange, held.routing_key
        if message is None or exchange or (queue in redis_channel._expires):
            return None
        body_text = message["body"]
        if not isinstance(body_text, str):
            return None
        if expires:
            message["properties"]["expiration"] = markers["expiration"]
        redis_channel._inplace_augment_message(message, exchange, queue)
        markers["body"], markers["tag"] = f"\x00{uuid()}\x00", f"\x00{uuid()}\x00"
        message["body"] = markers["body"]
        message["properties"]["delivery_tag"] = markers["tag"]
        key = redis_channel._q_for_pri(
            queue, redis_channel._get_message_priority(message, reverse=False)
        )
        return RedisMessages(
            redis_channel,
            key,
            _Template(_kombu_dumps(message), markers),
            _Template(body_text, markers),
            self._repr_limits,
        )

    def _declaration(self, connection: Any) -> list[Any]:
        """What to declare: nothing once kombu has declared the queue on this connection.

        The check kombu's ``maybe_declare`` makes, in the set it keeps on the connection,
        without its retry wrapper and the copy of the queue it binds for each message.
        """
        if (
            self._cached_declaration is not None
            and self._cached_declaration in connection.declared_entities
        ):
            return []
        return list(self._declare)


_ABSENT = object()


class _HeldBack:
    """Stands for kombu's publish batch in ``Producer._publish``: keeps the message kombu
    prepared, and where it goes, instead of sending it."""

    def __init__(self) -> None:
        self.message: dict[str, Any] | None = None
        self.exchange: str | None = None
        self.routing_key: str | None = None

    def publish(self, channel: Any, message: dict[str, Any], **kwargs: Any) -> None:
        self.message = message
        self.exchange, self.routing_key = kwargs.get("exchange"), kwargs.get("routing_key")


class _Template:
    """A JSON text with markers (each a JSON string of its own) where each message has its
    own value, kept as a format string: ``str.format_map`` fills it in C, in one pass."""

    def __init__(self, text: str, markers: Mapping[str, str]) -> None:
        names = {_kombu_dumps(marker): name for name, marker in markers.items()}
        pattern = re.compile("|".join(re.escape(quoted) for quoted in names))
        pieces = pattern.split(text)
        fields = ["{" + names[found] + "}" for found in pattern.findall(text)] + [""]
        self._format = "".join(
            piece.replace("{", "{{").replace("}", "}}") + field
            for piece, field in zip(pieces, fields, strict=True)
        )

    def fill(self, values: Mapping[str, str]) -> str:
        """The text, each marker replaced by its value (JSON already)."""
        return self._format.format_map(values)


class RedisMessages:
    """The messages of one task to one queue as kombu's Redis transport writes them (a JSON
    text each, pushed to the queue's list), written from one template (``TaskMessage.on_redis``):
    what ``send`` would push, field by field, for the cost of filling in the ids."""

    def __init__(
        self,
        channel: Any,
        key: str,
        message: _Template,
        body: _Template,
        repr_limits: tuple[int, int],
    ) -> None:
        self._channel = channel
        self.key = key
        """The list the messages go to (the queue's, of their priority)."""
        self._message = message
        self._body = body
        self._repr_limits = repr_limits

    def write(
        self,
        task_id: str,
        delivery_tag: str,
        kwargs: Mapping[str, str | None],
        fields: Mapping[str, Any],
        kwargsrepr: str | None = None,
    ) -> str:
        """One message: its task id, kombu's delivery tag, the values of the kwargs and of the
        headers and properties (``fields``) the template was made for, and what its kwargs show
        (``kwargsrepr``: Celery's ``saferepr`` of them when not given)."""
        if kwargsrepr is None:
            kwargsrepr = kwargs_repr(kwargs, self._repr_limits)
        string = _ascii_string  # most values are strings: written without _json's call
        values = {
            name: string(value) if type(value) is str else _json(value)
            for name, value in kwargs.items()
        }
        for name, value in fields.items():
            values[name] = string(value) if type(value) is str else _json(value)
        values["id"] = string(task_id)
        values["kwargsrepr"] = string(kwargsrepr)
        body, _ = self._channel.encode_body(self._body.fill(values), self._channel.body_encoding)
        values["body"] = _json(body)
        values["tag"] = string(delivery_tag)
        return self._message.fill(values)


def _json(value: Any) -> str:
    """``value`` as kombu's JSON writes it: a str ASCII-escaped, an int in decimal."""
    kind = type(value)
    if kind is str:
        return _ascii_string(value)
    if kind is int:
        return str(value)
    return _kombu_dumps(value)


_kombu_dumps: Callable[[Any], str] = kombu_json.dumps
"""kombu's JSON, which writes every message of its Redis transport."""
_ascii_string = json.encoder.encode_basestring_ascii


def push_messages(channel: Any, pushes: Sequence[tuple[str, list[str]]]) -> None:
    """Each list of messages to its key, in order (one ``LPUSH`` of many values pushes them
    as one ``LPUSH`` each would), in one pipeline without retry: on failure kombu's
    ``BatchPublishError``, delivery uncertain, as kombu's own publish batch raises."""
    with channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipeline:
        for key, messages in pushes:
            pipeline.lpush(key, *messages)
        try:
            pipeline.execute()
        except Exception as error:
            raise BatchPublishError("Redis publish batch failed; delivery is uncertain") from error
