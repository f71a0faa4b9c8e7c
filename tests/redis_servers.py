"""Redis servers of a test's own: a three-master Redis Cluster, a master with its replica and a
sentinel. Each runs ``redis-server`` on free local ports, in a directory of its own, and is
stopped (SIGTERM, then SIGKILL) when its context ends; no service of the machine is touched.

Imported by plain name (``from redis_servers import redis_cluster``), as ``services`` is; the
benchmarks put ``tests`` on ``sys.path`` to use it too.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis

SLOTS = 16384
HOST = "127.0.0.1"
NODE_TIMEOUT_MS = 1000
"""How long a cluster waits before it calls a silent master failed: a killed master is replaced
within about two of these."""


def free_port(*, bus: bool = False) -> int:
    """A local port no one listens on (and ``port + 10000`` too, a cluster node's bus)."""
    while True:
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            port = int(probe.getsockname()[1])
        if port + 10000 > 65535 and bus:
            continue
        if not bus or _free(port + 10000):
            return port


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
        return True


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if condition():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout}s for {what}")
        time.sleep(0.05)


@dataclass
class Server:
    """One ``redis-server`` process of the test's own."""

    port: int
    process: subprocess.Popen[bytes]
    client: Redis = field(init=False)

    def __post_init__(self) -> None:
        self.client = Redis(HOST, self.port, socket_timeout=2, socket_connect_timeout=2)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def kill(self) -> None:
        """Kill the process at once, as a crash would."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


def start_server(directory: Path, *args: str, sentinel: bool = False) -> Server:
    """A ``redis-server`` (``--sentinel`` with a config file) on a free port, answering PING."""
    port = free_port(bus="--cluster-enabled" in args)
    work = directory / str(port)
    work.mkdir()
    # setpriv (util-linux) gives the server a SIGKILL when this process dies, however it dies
    # (a run killed by its timeout): no node outlives its test on a port of its own.
    command = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
    command.append("redis-server")
    if sentinel:
        config = work / "sentinel.conf"
        config.write_text("", encoding="utf-8")
        command += [str(config), "--sentinel"]
    command += ["--port", str(port), "--bind", HOST, "--dir", str(work)]
    if not sentinel:
        command += ["--save", "", "--appendonly", "no"]
    command += list(args)
    with (work / "log").open("wb") as log:  # the child keeps its own copy of the file
        server = Server(port, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
    wait_for(lambda: bool(server.client.ping()), f"redis-server on {port}")
    return server


@dataclass
class Cluster:
    """A Redis Cluster of the test's own: its masters, each with its replicas."""

    masters: list[Server]
    replicas: dict[int, list[Server]]
    """The replicas of each master, by the master's port."""

    @property
    def url(self) -> str:
        return f"redis+cluster://{self.masters[0].address}"

    @property
    def servers(self) -> list[Server]:
        return [*self.masters, *(r for group in self.replicas.values() for r in group)]

    def master_of(self, key: str) -> Server:
        """The master that serves ``key``'s slot now."""
        slot = int(self.masters[0].client.execute_command("CLUSTER KEYSLOT", key))
        for server in self.servers:
            with contextlib.suppress(Exception):
                for start, end, (_host, port, *_), *_ in server.client.execute_command(
                    "CLUSTER SLOTS"
                ):
                    if start <= slot <= end:
                        return next(s for s in self.servers if s.port == port)
        raise AssertionError(f"no master serves {key!r}")


def _ok(server: Server) -> bool:
    return bool(server.client.cluster("INFO")["cluster_state"] == "ok")


@contextlib.contextmanager
def redis_cluster(masters: int = 3, replicas: int = 0) -> Iterator[Cluster]:
    """A cluster of ``masters`` masters, the slots split evenly, each with ``replicas``."""
    directory = Path(tempfile.mkdtemp(prefix="ddd-celery-cluster-"))
    args = (
        "--cluster-enabled",
        "yes",
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
        "--cluster-config-file",
        "nodes.conf",
    )
    started: list[Server] = []
    try:
        heads = [start_server(directory, *args) for _ in range(masters)]
        started += heads
        groups = {
            head.port: [start_server(directory, *args) for _ in range(replicas)] for head in heads
        }
        started += [r for group in groups.values() for r in group]
        for index, head in enumerate(heads):
            first, last = SLOTS * index // masters, SLOTS * (index + 1) // masters - 1
            head.client.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
        for server in started[1:]:
            server.client.execute_command("CLUSTER MEET", HOST, started[0].port)
        for head in heads:
            head_id = head.client.execute_command("CLUSTER MYID").decode()
            for replica in groups[head.port]:
                wait_for(
                    lambda r=replica, i=head_id: i in _nodes(r), "a replica to meet its master"
                )
                replica.client.execute_command("CLUSTER REPLICATE", head_id)
        wait_for(lambda: all(_ok(server) for server in started), "the cluster to be ok")
        for replica in (r for group in groups.values() for r in group):
            wait_for(
                lambda r=replica: r.client.info("replication")["master_link_status"] == "up",
                "a replica to follow its master",
            )
        yield Cluster(heads, groups)
    finally:
        for server in started:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _nodes(server: Server) -> str:
    reply = server.client.execute_command("CLUSTER NODES")
    return reply.decode() if isinstance(reply, bytes) else str(reply)


@dataclass
class Sentinelled:
    """A master, its replica and a sentinel watching them under ``SERVICE``."""

    master: Server
    replica: Server
    sentinel: Server

    @property
    def url(self) -> str:
        return f"redis+sentinel://{self.sentinel.address}/{SERVICE}"


SERVICE = "ddd-celery-test"


@contextlib.contextmanager
def redis_sentinel() -> Iterator[Sentinelled]:
    """A master, a replica of it and one sentinel (quorum 1) that fails over within ~2 s."""
    directory = Path(tempfile.mkdtemp(prefix="ddd-celery-sentinel-"))
    started: list[Server] = []
    try:
        master = start_server(directory)
        started.append(master)
        replica = start_server(directory, "--replicaof", HOST, str(master.port))
        started.append(replica)
        sentinel = start_server(directory, sentinel=True)
        started.append(sentinel)
        sentinel.client.execute_command("SENTINEL MONITOR", SERVICE, HOST, master.port, 1)
        for option, value in (("down-after-milliseconds", 1000), ("failover-timeout", 5000)):
            sentinel.client.execute_command("SENTINEL SET", SERVICE, option, value)
        wait_for(
            lambda: replica.client.info("replication")["master_link_status"] == "up",
            "the replica to follow its master",
        )
        yield Sentinelled(master, replica, sentinel)
    finally:
        for server in started:
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
