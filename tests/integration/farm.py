"""A real farm for tests: `mlscope api` and `mlscope worker` as subprocesses, on the real Redis or
RabbitMQ and the real PostgreSQL of this machine.

Each test gets brokers of its own: Redis database FARM_REDIS_DB, emptied first; on RabbitMQ a
virtual host made for the test and deleted after it. So no message of one test (or of an earlier
run) can reach another test's workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from mlscope.client import Client
from mlscope.registry.agents import AgentInfo, AgentRegistry

REPO = Path(__file__).resolve().parents[2]
RUNTIME_MANIFESTS = REPO / "tests" / "data" / "runtime-manifests"
FARM_REDIS_DB = 12
REDIS_URL = f"redis://127.0.0.1:6379/{FARM_REDIS_DB}"
TOKEN = "farm-test-token"
# A measure section that keeps a traced job on a tiny model to about a second: short timed loops and
# two profiled iterations after one warm-up.
QUICK_TRACED = {
    "warmup_count": 2,
    "warmup_seconds": 0.0,
    "min_count": 10,
    "min_seconds": 0.2,
    "max_seconds": 5,
    "trace_iterations": 2,
    "trace_warmup": 1,
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout_s: float, what: str, poll_s: float = 0.2) -> Any:
    """condition()'s first truthy value, or AssertionError naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)


class Farm:
    """An api and any number of workers, sharing one store and one broker."""

    def __init__(
        self,
        *,
        broker_url: str,
        store_url: str,
        tmp: Path,
        cache_dir: Path,
        registry_url: str = REDIS_URL,
        visibility_timeout_s: float | None = None,
    ) -> None:
        self.tmp = tmp
        self.tag = uuid.uuid4().hex[:6]
        self.api_url = f"http://127.0.0.1:{free_port()}"
        self.env = {
            **os.environ,
            "MLSCOPE_STORE_URL": store_url,
            "MLSCOPE_BROKER_URL": broker_url,
            "MLSCOPE_REGISTRY_URL": registry_url,
            "MLSCOPE_API_URL": self.api_url,
            "MLSCOPE_API_TOKENS": TOKEN,
            "MLSCOPE_MANIFESTS": str(RUNTIME_MANIFESTS),
            "MLSCOPE_CACHE_DIR": str(cache_dir),
            "MLSCOPE_SETTINGS": str(tmp / "no-settings.toml"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        if visibility_timeout_s is not None:
            self.env["MLSCOPE_VISIBILITY_TIMEOUT_S"] = str(visibility_timeout_s)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.registry = AgentRegistry(registry_url, ttl_s=3)
        self.client = Client(self.api_url, TOKEN, timeout_s=30)

    def capability(self, name: str) -> str:
        """A capability no other test's worker has: cpu.x86_64.<name><tag>."""
        return f"cpu.x86_64.{name}{self.tag}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [sys.executable, "-m", "mlscope", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.tmp,
        )
        self.processes[name] = process
        return process

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start_api(self) -> None:
        port = self.api_url.rsplit(":", 1)[1]
        process = self._spawn("api", "api", "--port", port)

        def up() -> bool:
            assert process.poll() is None, f"mlscope api exited:\n{self.log('api')}"
            try:
                self.client.health()
            except Exception:
                return False
            return True

        wait_until(up, 60, "the api to answer")

    def start_worker(
        self,
        agent_id: str,
        *capabilities: str,
        extra: tuple[str, ...] = (),
        name_itself: bool = False,
        heartbeat_ttl_s: float = 3,
    ) -> AgentInfo:
        """Start `mlscope worker --agent-id AGENT_ID` (with name_itself, without --agent-id: the worker
        picks its id; AGENT_ID then names only its log) and wait until it consumes."""
        args = ["worker", "--heartbeat-ttl", str(heartbeat_ttl_s), "--loglevel", "INFO"]
        if not name_itself:
            args += ["--agent-id", agent_id]
        for capability in capabilities:
            args += ["--capability", capability]
        process = self._spawn(agent_id, *args, *extra)

        def live() -> AgentInfo | None:
            assert process.poll() is None, f"worker {agent_id} exited:\n{self.log(agent_id)}"
            if " ready." not in self.log(agent_id):  # Celery's consumer is up
                return None
            if not name_itself:
                return self.registry.get(agent_id)
            return next((a for a in self.registry.live() if a.pid == process.pid), None)

        info: AgentInfo = wait_until(live, 90, f"worker {agent_id} to be live")
        return info

    def signal(self, name: str, sig: signal.Signals) -> None:
        self.processes[name].send_signal(sig)

    def wait_exit(self, name: str, timeout_s: float = 60) -> int:
        return self.processes[name].wait(timeout=timeout_s)

    def status(self, evaluation_id: str) -> str:
        return str(self.client.evaluation(evaluation_id)["status"])

    def stop(self) -> None:
        """SIGINT to every process, then SIGKILL to any still running 20 s later: one that needed it
        is named in a warning with its log's last lines (a process that outlives its SIGINT costs
        every test that uses a farm 20 s)."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for name, process in self.processes.items():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                tail = "\n".join(self.log(name).splitlines()[-15:])
                warnings.warn(
                    f"farm: {name} was still running 20 s after SIGINT; killed. Its log ends:\n{tail}",
                    stacklevel=2,
                )
        self.registry.close()


def empty_redis_db() -> None:
    connection = redis.Redis.from_url(REDIS_URL)
    try:
        connection.flushdb()
    finally:
        connection.close()


class RabbitVhost:
    """A RabbitMQ virtual host for one test, made and deleted with rabbitmqctl."""

    def __init__(self) -> None:
        self.name = f"mlscope-test-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> str:
        for command in (
            ["add_vhost", self.name],
            ["set_permissions", "-p", self.name, "guest", ".*", ".*", ".*"],
        ):
            subprocess.run(["rabbitmqctl", "-q", *command], check=True, capture_output=True, timeout=60)
        return f"amqp://guest:guest@127.0.0.1:5672/{self.name}"

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(
                ["rabbitmqctl", "-q", "delete_vhost", self.name], check=False, capture_output=True, timeout=60
            )
