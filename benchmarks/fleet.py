"""How the farm behaves as its fleet grows: dispatch, latency, the API under many clients, and what
each agent costs the registry and the sweeper.

    .venv/bin/python benchmarks/fleet.py [--agents 10,50,200] [--real 50] [--executors 4] [--jobs 200]

A Redis server and a PostgreSQL server of the benchmark's own (the machine's shared ones are never
touched), one real `mlscope api`, and a fleet that grows to each N in turn:

- real agents: `mlscope worker` processes (up to --real), each with an agent id and a capability set
  of its own (cpu.x86_64.a<i>); the first --executors of them also have cpu.x86_64.fleet, which every
  measured job targets, and run benchmarks/dispatch.py's no-op model (torch.nn.Identity, inline);
- simulated agents, past --real: registered in the same registry with their own ids, capabilities and
  queues, heartbeating at a worker's rate (every TTL/3 s, one registry write each), their queues
  polled by one multiplexed consumer (BRPOP over all of them, as Celery's Redis transport does). They
  run no jobs: they are the load a fleet puts on the registry, the sweeper, the API's reads and the
  broker.

Per N, in one run:
  - dispatch rate: jobs/s through API → broker → the executors, alternating (A/B/A/B) with bursts of
    the same job through as many bare Celery workers on the same broker (benchmarks/bare_celery.py);
    the ratio (target ≥ 0.8);
  - submit→start p50/p99 of jobs sent one at a time to an idle fleet;
  - the API's read (GET /api/v1/agents) and submission p99 under 50 concurrent clients (targets ≤ 100 ms
    and ≤ 200 ms); the clients are threads of this process, on the same cores;
  - with the fleet idle (only heartbeats and sweeps): the API's CPU as a share of one core (target ≤ 1%
    at 200 agents), Redis's CPU per agent, one registry read (live(): what every sweep and agent
    listing costs) and one route's read (LiveCache.snapshot() while only heartbeats happen: what each
    submission costs);
  - lost (a job that did not end `succeeded`) and doubled (a job with other than one set of
    measurements, or more evaluations than submissions): target 0 and 0.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.dispatch import HERE, MANIFEST, MEASURE, Processes, _percentile, _ts, bare_job
from mlscope.client import Client
from mlscope.contract.queues import queues_for
from mlscope.registry.agents import AgentInfo, AgentRegistry, LiveCache
from mlscope.store import open_store
from tests.fixtures.private_postgres import PrivatePostgres, _binaries
from tests.fixtures.private_redis import PrivateRedis
from tests.integration.farm import TOKEN, Farm, wait_until

EXECUTE = "cpu.x86_64.fleet"
HEARTBEAT_TTL_S = 15.0
BARE_QUEUE = "bench.bare"


@dataclass
class FleetRow:
    """The figures of one fleet size."""

    agents: int
    real: int
    simulated: int
    mlscope_jobs_per_s: float
    bare_jobs_per_s: float
    ratio: float
    start_p50_ms: float
    start_p99_ms: float
    read_p99_ms: float
    submit_p99_ms: float
    api_cpu_share: float
    redis_cpu_per_agent: float
    live_ms: float
    route_ms: float
    jobs: int
    lost: int
    doubled: int


def _capability(index: int) -> str:
    return f"cpu.x86_64.a{index}"


def _agent_id(index: int) -> str:
    return f"fleet-{index:04d}"


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc (Linux)."""
    fields_ = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields_[11]) + int(fields_[12])) / 100.0


class SimulatedAgents:
    """Agents that heartbeat and whose queues are polled, in two threads of this process."""

    def __init__(self, registry_url: str) -> None:
        self.registry = AgentRegistry(registry_url, ttl_s=HEARTBEAT_TTL_S)
        self.poller = redis.Redis.from_url(registry_url)
        self.agents: list[AgentInfo] = []
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._beat, daemon=True),
            threading.Thread(target=self._poll, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def add(self, index: int) -> None:
        capabilities = (_capability(index),)
        info = AgentInfo(
            id=_agent_id(index),
            hostname="simulated",
            capabilities=capabilities,
            frameworks={"pytorch": "simulated"},
            runners=("inline",),
            queues=tuple(queues_for(["pytorch"], capabilities, _agent_id(index))),
        )
        self.registry.register(info)
        self.agents.append(info)

    def _beat(self) -> None:
        while not self.stopping.wait(HEARTBEAT_TTL_S / 3):
            for info in list(self.agents):
                self.registry.heartbeat(info)

    def _poll(self) -> None:
        while not self.stopping.is_set():
            queues = sorted({q for info in list(self.agents) for q in info.queues})
            if queues:
                self.poller.brpop(queues, timeout=1)  # nothing is sent to them: an idle consumer
            else:
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=10)
        for info in self.agents:
            self.registry.unregister(info.id)
        self.registry.close()
        self.poller.close()


class Fleet:
    """A farm (api, store, broker) and a fleet that grows: real workers first, then simulated ones."""

    def __init__(self, farm: Farm, *, redis_pid: int, real: int, executors: int) -> None:
        self.farm, self.redis_pid, self.real_max, self.executors = farm, redis_pid, real, executors
        self.real = 0
        self.simulated = SimulatedAgents(farm.env["MLSCOPE_REGISTRY_URL"])
        self.bare = Processes({**farm.env, "PYTHONPATH": f"{farm.env['PYTHONPATH']}:{HERE}"}, farm.tmp)
        self.celery = Celery("fleet-client", broker=farm.env["MLSCOPE_BROKER_URL"], set_as_current=False)
        self.celery.conf.update(task_serializer="json", task_ignore_result=True)
        self.times = redis.Redis.from_url(farm.env["MLSCOPE_REGISTRY_URL"])
        self.registry = AgentRegistry(farm.env["MLSCOPE_REGISTRY_URL"], ttl_s=HEARTBEAT_TTL_S)
        self.submitted: list[str] = []
        self.bare_sent = 0
        self.bare_job: dict[str, Any] = {}

    @property
    def size(self) -> int:
        return self.real + len(self.simulated.agents)

    def grow(self, agents: int) -> None:
        """Add agents until the fleet has `agents`; executors and bare workers warm up with the first."""
        while self.size < agents:
            index = self.size
            if self.real < self.real_max:
                capabilities = [_capability(index)] + ([EXECUTE] if index < self.executors else [])
                self.farm.start_worker(
                    _agent_id(index), *capabilities, heartbeat_ttl_s=HEARTBEAT_TTL_S,
                    extra=("--runner", "inline", "--shared-host"),
                )  # fmt: skip
                self.real += 1
            else:
                self.simulated.add(index)
        if not self.bare_job:
            self._warm_up()

    def _warm_up(self) -> None:
        """Each executor and each bare worker imports torch on its first job: two jobs pinned to each, so
        that none meets its first inside a measurement."""
        executors = min(self.executors, self.real)
        self.bare_job = bare_job(self.farm.env)
        for index in range(executors):
            name = f"bare-{index}"
            self.bare.start(
                name, sys.executable, "-m", "celery", "-A", "bare_celery", "worker", "--pool=solo",
                "--concurrency=1", f"--queues={BARE_QUEUE},bench.{name}", f"--hostname={name}@%h",
                "--loglevel=WARNING", "--without-gossip", "--without-mingle", cwd=HERE,
            )  # fmt: skip
            for _ in range(2):
                self._send_bare(queue=f"bench.{name}")
        pinned = [self._request(f"agent:{_agent_id(i)}") for i in range(executors) for _ in range(2)]
        self.farm.client.wait([self._submit(self.farm.client, r) for r in pinned], timeout_s=300)
        wait_until(lambda: self.times.scard("bench:done") >= self.bare_sent, 300, "bare workers to warm up")

    @staticmethod
    def _request(target: str = EXECUTE) -> dict[str, Any]:
        return {
            "model": "noop",
            "framework": "pytorch",
            "target": target,
            "runner": "inline",
            "measure": MEASURE,
        }

    def _submit(self, client: Client, request: dict[str, Any]) -> str:
        evaluation_id = str(client.submit(request)["id"])
        self.submitted.append(evaluation_id)
        return evaluation_id

    def _send_bare(self, queue: str = BARE_QUEUE) -> str:
        self.bare_sent += 1
        return str(self.celery.send_task("bench.evaluate", args=(self.bare_job,), queue=queue).id)

    def _settled(self) -> None:
        with open_store(self.farm.env["MLSCOPE_STORE_URL"]) as store:
            active = ("queued", "running")
            wait_until(
                lambda: not any(store.count_evaluations(model="noop", status=s) for s in active),
                900, "the fleet's jobs to end", 0.25,
            )  # fmt: skip

    def mlscope_burst(self, jobs: int) -> float:
        first = time.time()
        ids = [self._submit(self.farm.client, self._request()) for _ in range(jobs)]
        self._settled()
        with open_store(self.farm.env["MLSCOPE_STORE_URL"]) as store:
            last = max(_ts(str(store.get_evaluation(i)["finished_at"])) for i in ids)
        return jobs / (last - first)

    def bare_burst(self, jobs: int) -> float:
        first = time.time()
        ids = [self._send_bare() for _ in range(jobs)]
        wait_until(lambda: self.times.scard("bench:done") >= self.bare_sent, 900, "the bare burst", 0.25)
        last = max(float(self.times.hget(f"bench:{t}", "ended") or 0) for t in ids)
        return jobs / (last - first)

    def start_latencies(self, count: int) -> list[float]:
        latencies = []
        for _ in range(count):
            sent = time.time()
            evaluation_id = self._submit(self.farm.client, self._request())
            (done,) = self.farm.client.wait([evaluation_id], poll_s=0.01, timeout_s=120)
            latencies.append((_ts(done["started_at"]) - sent) * 1000)
        return latencies

    def clients(self, count: int, rounds: int) -> tuple[list[float], list[float]]:
        """`count` concurrent clients, each `rounds` times: four reads of the agent list, one submission."""
        reads: list[float] = []
        submits: list[float] = []
        start = threading.Barrier(count)

        def client() -> None:
            mine = Client(self.farm.api_url, TOKEN, timeout_s=30)
            start.wait()
            for _ in range(rounds):
                for _ in range(4):
                    began = time.perf_counter()
                    mine.agents()
                    reads.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                self._submit(mine, self._request())
                submits.append((time.perf_counter() - began) * 1000)

        threads = [threading.Thread(target=client) for _ in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._settled()
        return reads, submits

    def idle_costs(self, seconds: float) -> tuple[float, float, float, float]:
        """With no jobs: the API's CPU share of one core, Redis's CPU share per agent, one live() and one
        route's LiveCache.snapshot() (ms, medians)."""
        api_pid = self.farm.processes["api"].pid
        api_before, redis_before, began = _cpu_s(api_pid), _cpu_s(self.redis_pid), time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - began
        api_share = (_cpu_s(api_pid) - api_before) / elapsed
        redis_share = (_cpu_s(self.redis_pid) - redis_before) / elapsed
        timings = []
        for _ in range(20):
            began = time.perf_counter()
            self.registry.live()
            timings.append((time.perf_counter() - began) * 1000)
        cache = LiveCache(self.registry)
        cache.snapshot()
        routes = []
        for _ in range(20):
            began = time.perf_counter()
            cache.snapshot()
            routes.append((time.perf_counter() - began) * 1000)
        return (
            api_share,
            redis_share / max(1, self.size),
            statistics.median(timings),
            statistics.median(routes),
        )

    def lost_and_doubled(self) -> tuple[int, int]:
        with open_store(self.farm.env["MLSCOPE_STORE_URL"]) as store:
            results = [store.get_evaluation(i) for i in self.submitted]
            evaluations = store.count_evaluations(model="noop")
        lost = sum(1 for r in results if r["status"] != "succeeded")
        doubled = sum(1 for r in results if len(r["measurements"]) != 1) + max(0, evaluations - len(results))
        return lost, doubled

    def stop(self) -> None:
        self.simulated.stop()
        self.bare.stop()
        self.times.close()
        self.registry.close()


def measure(
    fleet: Fleet, agents: int, *, jobs: int, latency_jobs: int, clients: int, rounds: int, idle_s: float
) -> FleetRow:
    """Grow `fleet` to `agents` and take one row of figures."""
    fleet.grow(agents)
    ours, bare = [], []
    for _ in range(2):  # A/B/A/B: drift on the machine falls on both sides
        ours.append(fleet.mlscope_burst(max(1, jobs // 2)))
        bare.append(fleet.bare_burst(max(1, jobs // 2)))
    latencies = fleet.start_latencies(latency_jobs)
    reads, submits = fleet.clients(clients, rounds)
    api_share, redis_per_agent, live_ms, route_ms = fleet.idle_costs(idle_s)
    lost, doubled = fleet.lost_and_doubled()
    mlscope_rate, bare_rate = statistics.mean(ours), statistics.mean(bare)
    return FleetRow(
        agents=fleet.size,
        real=fleet.real,
        simulated=len(fleet.simulated.agents),
        mlscope_jobs_per_s=mlscope_rate,
        bare_jobs_per_s=bare_rate,
        ratio=mlscope_rate / bare_rate,
        start_p50_ms=statistics.median(latencies),
        start_p99_ms=_percentile(latencies, 0.99),
        read_p99_ms=_percentile(reads, 0.99),
        submit_p99_ms=_percentile(submits, 0.99),
        api_cpu_share=api_share,
        redis_cpu_per_agent=redis_per_agent,
        live_ms=live_ms,
        route_ms=route_ms,
        jobs=len(fleet.submitted),
        lost=lost,
        doubled=doubled,
    )


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def print_table(rows: list[FleetRow], clients: int) -> None:
    print(
        f"{'agents':>6} {'real+sim':>9} {'mlscope/s':>9} {'bare/s':>7} {'ratio ≥0.8':>13} "
        f"{'start p50/p99 ms':>16} {'read p99 ms ≤100':>17} {'submit p99 ms ≤200':>19} "
        f"{'API CPU idle':>13} {'Redis CPU/agent':>15} {'live() ms':>9} {'route ms':>8} {'jobs':>5} "
        f"{'lost':>4} {'doubled':>7}"
    )
    for row in rows:
        print(
            f"{row.agents:>6} {f'{row.real}+{row.simulated}':>9} {row.mlscope_jobs_per_s:>9.1f} "
            f"{row.bare_jobs_per_s:>7.1f} {f'{row.ratio:.2f} {_verdict(row.ratio >= 0.8)}':>13} "
            f"{f'{row.start_p50_ms:.1f}/{row.start_p99_ms:.1f}':>16} "
            f"{f'{row.read_p99_ms:.0f} {_verdict(row.read_p99_ms <= 100)}':>17} "
            f"{f'{row.submit_p99_ms:.0f} {_verdict(row.submit_p99_ms <= 200)}':>19} "
            f"{f'{row.api_cpu_share:.2%}':>13} {f'{row.redis_cpu_per_agent:.4%}':>15} {row.live_ms:>9.2f} "
            f"{row.route_ms:>8.2f} {row.jobs:>5} {row.lost:>4} {row.doubled:>7}"
        )
    largest = max(rows, key=lambda r: r.agents)
    heartbeats = _verdict(largest.api_cpu_share <= 0.01) if largest.agents >= 200 else "not reached"
    nothing_lost = _verdict(not any(r.lost or r.doubled for r in rows))
    print(
        f"API CPU idle at {largest.agents} agents (heartbeats, sweeps): {largest.api_cpu_share:.2%} of one "
        f"core (target ≤ 1% at 200: {heartbeats}); lost {sum(r.lost for r in rows)}, doubled "
        f"{sum(r.doubled for r in rows)} (target 0 and 0: {nothing_lost}); {clients} concurrent clients"
    )


@contextmanager
def private_fleet(root: Path, *, real: int, executors: int) -> Iterator[Fleet]:
    """A Redis and a PostgreSQL of the benchmark's own, an api on them, an empty fleet; all stopped after."""
    binaries = _binaries()
    if binaries is None:
        raise SystemExit("fleet: PostgreSQL's server programs (initdb, pg_ctl) are not installed")
    postgres_dir = Path(tempfile.mkdtemp(prefix="mlscope-postgres-"))
    postgres = PrivatePostgres(binaries, postgres_dir)
    broker = PrivateRedis(root / "redis")
    farm: Farm | None = None
    fleet: Fleet | None = None
    try:
        postgres.start()
        broker.start()
        (root / "manifests").mkdir()
        (root / "manifests" / "noop-pytorch.yaml").write_text(MANIFEST)
        farm = Farm(
            broker_url=broker.url,
            store_url=postgres.create_database("fleet"),
            tmp=root,
            cache_dir=root / "cache",
            registry_url=broker.url,
        )
        farm.env["MLSCOPE_MANIFESTS"] = str(root / "manifests")
        farm.start_api()
        assert broker.process is not None
        fleet = Fleet(farm, redis_pid=broker.process.pid, real=real, executors=executors)
        yield fleet
    finally:
        if fleet is not None:
            fleet.stop()
        if farm is not None:
            farm.stop()
        broker.stop()
        if postgres.is_running():
            postgres.stop()
        shutil.rmtree(postgres_dir, ignore_errors=True)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or any(n < 1 for n in sizes) or sizes != sorted(sizes):
        print(
            f"fleet: --agents expects increasing positive integers separated by commas, got {text!r}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--agents", default="10,50,200", help="fleet sizes, increasing (default 10,50,200)")
    parser.add_argument(
        "--real", type=int, default=50, help="real worker processes at most; the rest simulated"
    )
    parser.add_argument("--executors", type=int, default=4, help="real agents that run the measured jobs")
    parser.add_argument(
        "--jobs", type=int, default=200, help="jobs per size, each side (mlscope, bare Celery)"
    )
    parser.add_argument("--latency-jobs", type=int, default=20, help="jobs sent one at a time, per size")
    parser.add_argument("--clients", type=int, default=50, help="concurrent API clients")
    parser.add_argument("--rounds", type=int, default=2, help="each client: rounds of 4 reads + 1 submission")
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle window for the CPU figures")
    args = parser.parse_args()
    sizes = _sizes(args.agents)
    for name in ("real", "executors", "jobs", "latency_jobs", "clients", "rounds"):
        if getattr(args, name) < 1:
            print(
                f"fleet: --{name.replace('_', '-')} expects a positive integer, got {getattr(args, name)}",
                file=sys.stderr,
            )
            raise SystemExit(2)
    if args.executors > min(args.real, sizes[0]):
        print(
            f"fleet: --executors expects at most --real and the smallest --agents, got {args.executors}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        private_fleet(Path(tmp), real=args.real, executors=args.executors) as fleet,
    ):
        for agents in sizes:
            row = measure(
                fleet, agents, jobs=args.jobs, latency_jobs=args.latency_jobs, clients=args.clients,
                rounds=args.rounds, idle_s=args.idle_s,
            )  # fmt: skip
            rows.append(row)
    print_table(rows, args.clients)


if __name__ == "__main__":
    main()
