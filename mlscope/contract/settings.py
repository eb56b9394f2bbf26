"""Settings: the environment, or a settings file; the environment wins.

The names are a contract shared by every part (docs/design.md, "Settings"). The settings file is TOML
at `$MLSCOPE_SETTINGS` or `<user config dir>/mlscope/settings.toml`, with the same names in lower
case and without the prefix (`store_url = "postgresql://..."`).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import platformdirs

from mlscope.contract.cost import check_price
from mlscope.contract.errors import UserError

__all__ = [
    "DEFAULT_DOCKER_PIDS_LIMIT",
    "DEFAULT_MAX_DATASET_BYTES",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "Settings",
    "client_token",
    "load_settings",
]

APP = "mlscope"


def _default_store_url() -> str:
    return f"sqlite:///{Path(platformdirs.user_data_dir(APP)) / 'mlscope.db'}"


def _default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir(APP))


def _default_model_store_dir() -> Path:
    """Shared memory where the system has it (the weights never touch a disk), else the temporary
    directory."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return base / "mlscope-models"


# The largest ONNX file the API takes (POST /api/v1/models): 2 GiB, protobuf's own limit for one file.
DEFAULT_MAX_UPLOAD_BYTES = 2 * 1024**3
# The largest dataset mlscope materialises or takes as an upload (POST /api/v1/datasets): 2 GiB.
DEFAULT_MAX_DATASET_BYTES = 2 * 1024**3
# Docker refuses a container memory limit under 6 MB.
_DOCKER_MIN_MEMORY_MB = 6
# No predictor imports a framework in less; a request's memory_limit_mb has the same floor.
_PREDICTOR_MIN_MEMORY_MB = 64
# The share of the machine's memory a predictor may use by default: the rest is the worker's, the
# store's and the system's, so a runaway predictor is ended by mlscope, not by the kernel's OOM
# killer choosing a victim among them.
_PREDICTOR_MEMORY_SHARE = 0.75
DEFAULT_DOCKER_PIDS_LIMIT = 4096


def _default_predictor_memory_mb() -> int:
    """75% of this machine's physical memory in MB; 0 (no limit) where the system does not say."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        return 0
    return max(int(total * _PREDICTOR_MEMORY_SHARE) // 2**20, 0)


@dataclass(frozen=True)
class Settings:
    """Every setting mlscope reads, validated on construction."""

    store_url: str = field(default_factory=_default_store_url)
    broker_url: str = "redis://127.0.0.1:6379/0"
    api_url: str = "http://127.0.0.1:8000"
    api_tokens: tuple[str, ...] = ()
    manifests: tuple[Path, ...] = ()
    cache_dir: Path = field(default_factory=_default_cache_dir)
    otlp_endpoint: str | None = None
    # The farm's own settings (additive to the contract's): where live workers register, how long
    # a job a worker took and never acknowledged stays invisible before Redis hands it to another
    # (None: each job's own time limit plus a margin; a dead worker's job comes back sooner, through
    # the sweeper), and whether reads of the API need a token too.
    registry_url: str | None = None
    visibility_timeout_s: float | None = None
    api_reads: str = "open"
    # The docker runner's limits for every container it starts: CPUs (fractions allowed; None: all
    # of the machine's), memory in MB (None: predictor_memory_mb's; a request's memory_limit_mb wins)
    # and processes, threads included (a fork bomb stops there; 0: no limit).
    docker_cpus: float | None = None
    docker_memory_mb: int | None = None
    docker_pids_limit: int = DEFAULT_DOCKER_PIDS_LIMIT
    # Every predictor's memory limit in MB when its request sets none, in a child process (its
    # resident memory) or a container (docker_memory_mb, when set, wins there): 75% of this
    # machine's memory. 0: no limit.
    predictor_memory_mb: int = field(default_factory=_default_predictor_memory_mb)
    # Raw latencies kept per measurement (an evenly strided subsample beyond it, recorded as such);
    # the summary always covers every sample. 0 keeps none.
    max_raw_latencies: int = 100_000
    # The largest model file the API accepts as an upload, in bytes (a larger one is answered 413).
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    # The largest dataset (its images' bytes; an uploaded zip's too) mlscope materialises or accepts.
    max_dataset_bytes: int = DEFAULT_MAX_DATASET_BYTES
    # What an hour of this machine costs (a positive number, in any currency), recorded in every
    # measurement's cost section; and the user's name for the machine (a cloud instance type),
    # recorded with the system. Unset: results carry no cost (one can be priced at read time).
    price_per_hour: float | None = None
    instance_type: str | None = None
    # The machine's model store (warm starts, docs/warm-start.md): its budget in MB of weights held
    # at once (0: no store, no warm start measured) and its directory (default: on shared memory,
    # /dev/shm/mlscope-models where there is one, else under the temporary directory).
    model_store_mb: int = 0
    model_store_dir: Path = field(default_factory=_default_model_store_dir)

    def __post_init__(self) -> None:
        for name in ("store_url", "broker_url", "api_url"):
            value = getattr(self, name)
            if "://" not in value:
                raise UserError(f"setting {name}={value!r} is not a URL: expected scheme://...", field=name)
        if self.registry_url is not None and not self.registry_url.startswith(("redis://", "rediss://")):
            raise UserError(
                f"setting registry_url={self.registry_url!r}: expected a redis:// URL", field="registry_url"
            )
        if self.visibility_timeout_s is not None and not self.visibility_timeout_s > 0:
            raise UserError(
                f"setting visibility_timeout_s={self.visibility_timeout_s!r}: expected seconds > 0, or "
                "unset for each job's own time limit",
                field="visibility_timeout_s",
            )
        if self.api_reads not in ("open", "token"):
            raise UserError(
                f"setting api_reads={self.api_reads!r}: expected 'open' or 'token'", field="api_reads"
            )
        if self.docker_cpus is not None and not (
            isinstance(self.docker_cpus, (int, float)) and 0 < self.docker_cpus < math.inf
        ):
            raise UserError(
                f"setting docker_cpus={self.docker_cpus!r}: expected a number of CPUs > 0 (e.g. 2 or 0.5)",
                field="docker_cpus",
            )
        if self.docker_memory_mb is not None and not (
            isinstance(self.docker_memory_mb, int)
            and not isinstance(self.docker_memory_mb, bool)
            and self.docker_memory_mb >= _DOCKER_MIN_MEMORY_MB
        ):
            raise UserError(
                f"setting docker_memory_mb={self.docker_memory_mb!r}: expected a whole number of MB "
                f">= {_DOCKER_MIN_MEMORY_MB}",
                field="docker_memory_mb",
            )
        for name, floor, unit in (
            ("predictor_memory_mb", _PREDICTOR_MIN_MEMORY_MB, " of MB"),
            ("docker_pids_limit", 1, ""),
        ):
            value = getattr(self, name)
            whole = isinstance(value, int) and not isinstance(value, bool)
            if not (whole and (value == 0 or value >= floor)):
                raise UserError(
                    f"setting {name}={value!r}: expected a whole number{unit} >= {floor}, or 0 for no limit",
                    field=name,
                )
        if not (
            isinstance(self.model_store_mb, int)
            and not isinstance(self.model_store_mb, bool)
            and self.model_store_mb >= 0
        ):
            raise UserError(
                f"setting model_store_mb={self.model_store_mb!r}: expected a whole number of MB >= 0 "
                "(the model store's budget; 0 for no model store)",
                field="model_store_mb",
            )
        if not str(self.model_store_dir).strip() or not Path(self.model_store_dir).is_absolute():
            raise UserError(
                f"setting model_store_dir={str(self.model_store_dir)!r}: expected an absolute directory "
                "(default: /dev/shm/mlscope-models where there is shared memory)",
                field="model_store_dir",
            )

        if not (
            isinstance(self.max_raw_latencies, int)
            and not isinstance(self.max_raw_latencies, bool)
            and self.max_raw_latencies >= 0
        ):
            raise UserError(
                f"setting max_raw_latencies={self.max_raw_latencies!r}: expected a whole number >= 0 "
                "(0 keeps no raw latencies)",
                field="max_raw_latencies",
            )

        if self.price_per_hour is not None:
            check_price(self.price_per_hour, "price_per_hour", "setting price_per_hour")
        if self.instance_type is not None and not self.instance_type.strip():
            raise UserError(
                "setting instance_type is empty: expected a name such as c7i.large", field="instance_type"
            )

        for name, default in (
            ("max_upload_bytes", DEFAULT_MAX_UPLOAD_BYTES),
            ("max_dataset_bytes", DEFAULT_MAX_DATASET_BYTES),
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise UserError(
                    f"setting {name}={value!r}: expected a whole number of bytes >= 1 "
                    f"(default {default}, 2 GiB)",
                    field=name,
                )

    @property
    def model_store(self) -> dict[str, Any]:
        """The model store as a job carries it ({"directory", "budget_mb"}); empty when there is none."""
        if not self.model_store_mb:
            return {}
        return {"directory": str(self.model_store_dir), "budget_mb": self.model_store_mb}

    @property
    def upload_dir(self) -> Path:
        """Where the API keeps uploaded models, one `<sha256>.onnx` each: `<cache_dir>/uploads`."""
        return self.cache_dir / "uploads"

    @property
    def dataset_upload_dir(self) -> Path:
        """Where the API keeps uploaded datasets, one `<sha256>.zip` each: `<cache_dir>/dataset-uploads`."""
        return self.cache_dir / "dataset-uploads"

    @property
    def agent_registry_url(self) -> str:
        """The Redis that holds the agent registry: `registry_url`, else the broker when it is Redis,
        else Redis on this machine."""
        if self.registry_url:
            return self.registry_url
        if self.broker_url.startswith(("redis://", "rediss://")):
            return self.broker_url
        return "redis://127.0.0.1:6379/0"


def _settings_file(env: Mapping[str, str]) -> Path:
    explicit = env.get("MLSCOPE_SETTINGS")
    return Path(explicit) if explicit else Path(platformdirs.user_config_dir(APP)) / "settings.toml"


def _read_file(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"settings file {path}: not valid TOML ({exc})") from exc


_WHOLE_NUMBERS = (
    "docker_memory_mb",
    "docker_pids_limit",
    "predictor_memory_mb",
    "max_raw_latencies",
    "max_upload_bytes",
    "max_dataset_bytes",
    "model_store_mb",
)


def _coerce(name: str, raw: Any) -> Any:
    if name == "api_tokens":
        items = raw if isinstance(raw, list) else str(raw).split(",")
        return tuple(t.strip() for t in items if t.strip())
    if name == "manifests":
        items = raw if isinstance(raw, list) else str(raw).split(os.pathsep)
        return tuple(Path(p).expanduser() for p in items if p)
    if name in ("cache_dir", "model_store_dir"):
        return Path(str(raw)).expanduser()
    if name == "visibility_timeout_s":
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise UserError(
                f"setting visibility_timeout_s={raw!r}: expected a number of seconds", field=name
            ) from None
    if name == "price_per_hour":
        return check_price(raw, name, "setting price_per_hour")
    if name == "docker_cpus":
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise UserError(f"setting docker_cpus={raw!r}: expected a number of CPUs", field=name) from None
    if name in _WHOLE_NUMBERS:
        unit = " of MB" if name.endswith("_mb") else " of bytes" if name.endswith("_bytes") else ""
        try:
            return int(str(raw).strip())
        except ValueError:
            raise UserError(f"setting {name}={raw!r}: expected a whole number{unit}", field=name) from None
    return str(raw)


def client_token(settings: Settings, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token a client of the API sends (the CLI, `mlscope.client`, a worker fetching an
    uploaded model): MLSCOPE_API_TOKEN from the environment, else the first of `settings.api_tokens`
    (MLSCOPE_API_TOKENS), else None."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    return env.get("MLSCOPE_API_TOKEN") or (settings.api_tokens[0] if settings.api_tokens else None)


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from the settings file, then the environment on top of it.

    Raises:
        UserError: a setting has an unknown name or a value of the wrong form.
    """
    env: Mapping[str, str] = os.environ if environ is None else environ
    known = {f.name for f in fields(Settings)}
    path = _settings_file(env)
    values: dict[str, Any] = {}
    for key, raw in _read_file(path).items():
        if key not in known:
            raise UserError(
                f"settings file {path}: unknown setting {key!r}; known: {', '.join(sorted(known))}"
            )
        values[key] = _coerce(key, raw)
    for name in known:
        raw = env.get(f"MLSCOPE_{name.upper()}")
        if raw:
            values[name] = _coerce(name, raw)
    return Settings(**values)
