"""The suite's own fault proxy: a TCP relay in front of Redis or PostgreSQL that a test makes
late, hung or cut, so a fault is made by the test and never by stopping the machine's services.

``FaultProxy`` listens on a free local port and relays every connection to its upstream. A test
(in this process, or a ``celery`` process it started, through the proxy's URL) then:

- ``delay_replies(seconds, every=N, matching=b"...", count=K)``: holds back the reply to every
  Nth request (or to each request holding ``matching``), at most ``count`` times; a late reply
  also holds back the replies after it on the same connection, as TCP would;
- ``hang()`` / ``resume()``: forwards nothing either way (connections stay open, new ones are
  accepted), as a server that stopped answering; what was sent is relayed on ``resume``;
- ``cut()`` / ``restore()``: closes every connection and refuses new ones, as a server down.

Import it as ``from fault_proxy import FaultProxy`` (``tests/`` is on the path of every test
module through the root ``conftest.py``), or run it alone for a process test to share:
``python tests/fault_proxy.py HOST:PORT`` prints its port and takes commands on stdin.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from urllib.parse import urlsplit


@dataclass
class _Delay:
    seconds: float
    every: int
    matching: bytes | None
    left: int | None


class FaultProxy:
    """A TCP relay to ``upstream`` (``(host, port)``) that a test makes late, hung or cut."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._mutex = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._up = True
        self._open: list[socket.socket] = []
        self._delay: _Delay | None = None
        self._requests = 0
        self.delayed = 0
        """How many replies were held back so far."""
        self.connections = 0
        """How many connections were relayed so far."""
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name="fault-proxy")
        self._acceptor.start()

    @classmethod
    def to_url(cls, url: str) -> FaultProxy:
        """A proxy to the server of a ``redis://`` or ``postgresql://`` URL."""
        parts = urlsplit(url)
        default = 5432 if parts.scheme.startswith("postgres") else 6379
        return cls((parts.hostname or "127.0.0.1", parts.port or default))

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's (user, database kept)."""
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (f"{userinfo}@" if userinfo else "") + f"127.0.0.1:{self.port}"
        return parts._replace(netloc=netloc).geturl()

    # faults

    def delay_replies(
        self,
        seconds: float,
        *,
        every: int = 1,
        matching: bytes | None = None,
        count: int | None = None,
    ) -> None:
        """Hold back by ``seconds`` the reply to every ``every``-th request (of those holding
        ``matching`` when given), ``count`` times at most (None: until ``no_delay``)."""
        with self._mutex:
            self._delay = _Delay(seconds, max(every, 1), matching, count)
            self._requests = 0

    def no_delay(self) -> None:
        with self._mutex:
            self._delay = None

    def hang(self) -> None:
        """Forward nothing either way until ``resume``; connections stay open."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones until ``restore``."""
        with self._mutex:
            self._up = False
            for sock in self._open:
                _close(sock)
            self._open.clear()

    def restore(self) -> None:
        with self._mutex:
            self._up = True

    def heal(self) -> None:
        """Every fault off: no delay, flowing, accepting."""
        self.no_delay()
        self.resume()
        self.restore()

    def close(self) -> None:
        self.heal()
        self.cut()
        _close(self._server)
        self._acceptor.join(timeout=5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # relaying

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self._server.accept()
            except OSError:
                return
            with self._mutex:
                if not self._up:
                    _close(downstream)
                    continue
                try:
                    upstream = socket.create_connection(self._upstream, timeout=5)
                except OSError:
                    _close(downstream)
                    continue
                upstream.settimeout(None)
                self._open += [downstream, upstream]
                self.connections += 1
            late = _LateReplies()
            threading.Thread(
                target=self._requests_pump, args=(downstream, upstream, late), daemon=True
            ).start()
            threading.Thread(
                target=self._replies_pump, args=(upstream, downstream, late), daemon=True
            ).start()

    def _requests_pump(
        self, source: socket.socket, sink: socket.socket, late: _LateReplies
    ) -> None:
        try:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    self._flowing.wait()
                    seconds = self._delay_for(data)
                    if seconds:
                        late.hold(seconds)
                    sink.sendall(data)
        finally:
            _close(source)
            _close(sink)

    def _replies_pump(self, source: socket.socket, sink: socket.socket, late: _LateReplies) -> None:
        try:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    self._flowing.wait()
                    seconds = late.take()
                    if seconds:
                        time.sleep(seconds)
                    sink.sendall(data)
        finally:
            _close(source)
            _close(sink)

    def _delay_for(self, request: bytes) -> float:
        with self._mutex:
            delay = self._delay
            if delay is None or (delay.left is not None and delay.left <= 0):
                return 0.0
            if delay.matching is not None and delay.matching not in request:
                return 0.0
            self._requests += 1
            if self._requests % delay.every:
                return 0.0
            if delay.left is not None:
                delay.left -= 1
            self.delayed += 1
            return delay.seconds


class _LateReplies:
    """The delay owed to the next reply of one connection, set by its request's pump."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._owed: list[float] = []

    def hold(self, seconds: float) -> None:
        with self._mutex:
            self._owed.append(seconds)

    def take(self) -> float:
        with self._mutex:
            return self._owed.pop(0) if self._owed else 0.0


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _serve(upstream: str) -> None:
    """Run a proxy to ``HOST:PORT``; print its port; obey commands on stdin, one per line:
    ``delay SECONDS [EVERY] [COUNT]``, ``no-delay``, ``hang``, ``resume``, ``cut``, ``restore``.
    """
    host, _, port = upstream.rpartition(":")
    with FaultProxy((host or "127.0.0.1", int(port))) as proxy:
        print(proxy.port, flush=True)
        for line in sys.stdin:
            word, *rest = line.split() or [""]
            if word == "delay":
                seconds = float(rest[0])
                every = int(rest[1]) if len(rest) > 1 else 1
                count = int(rest[2]) if len(rest) > 2 else None
                proxy.delay_replies(seconds, every=every, count=count)
            elif word == "no-delay":
                proxy.no_delay()
            elif word in {"hang", "resume", "cut", "restore"}:
                getattr(proxy, word)()
            print("ok", word, flush=True)


if __name__ == "__main__":
    _serve(sys.argv[1])
