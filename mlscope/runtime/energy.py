"""Energy per inference from the machine's own counters: a measurement's `energy` section.

Two sources, read before and after a measurement's queries (warm-up and timed phase, the window
the environment monitor samples):

- "rapl": Intel/AMD RAPL through the Linux powercap driver, the `energy_uj` counter of every
  package domain (`/sys/class/powercap/intel-rapl:N`; AMD's driver names them the same), summed
  over packages. A counter wraps to 0 past its `max_energy_range_uj`; one wrap per read-to-read
  interval is accounted for (at a few hundred watts a counter takes minutes to wrap).
- "nvml": NVIDIA's total energy counter of the evaluation's GPU
  (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded; Volta or newer).

Both count the whole package or board, not this process alone: the figure is the machine's energy
while it served these inferences, fair on a machine that does nothing else (the validity verdict
reports other tenants' CPU use). When neither source is readable, the section is
{"unavailable": reason}: never an estimate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mlscope.contract.errors import MlscopeError
from mlscope.contract.result import Energy

__all__ = [
    "POWERCAP_ROOT",
    "EnergyMeter",
    "EnergyUnavailable",
    "NvmlMeter",
    "RaplDomain",
    "RaplMeter",
    "energy_section",
    "open_energy_meter",
    "rapl_package_domains",
]

POWERCAP_ROOT = Path("/sys/class/powercap")
_MICRO = 1e-6
_MILLI = 1e-3


class EnergyUnavailable(MlscopeError):
    """No energy counter can be read here; the message says why, for the section's `unavailable`."""


class EnergyMeter(ABC):
    """A cumulative energy counter: `read()` twice, `joules_between` the readings."""

    SOURCE: ClassVar[str]

    @abstractmethod
    def read(self) -> tuple[int, ...]:
        """The counters now, in the source's own unit."""

    @abstractmethod
    def joules_between(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        """The energy spent between two readings, in joules."""

    def close(self) -> None:  # noqa: B027 - most counters hold nothing open
        """Release what reading needed (NVML's initialisation)."""


@dataclass(frozen=True)
class RaplDomain:
    """One RAPL package domain: its name ("package-0"), counter file and wrap-around range."""

    name: str
    energy_file: Path
    max_range_uj: int

    def read_uj(self) -> int:
        return int(self.energy_file.read_text().strip())

    def delta_uj(self, before: int, after: int) -> int:
        """Microjoules from `before` to `after`, across one wrap of the counter."""
        return after - before if after >= before else self.max_range_uj - before + after


def rapl_package_domains(root: Path = POWERCAP_ROOT) -> list[RaplDomain]:
    """The readable package domains under a powercap tree (sub-domains such as core and dram are
    inside their package's figure, so only packages are summed).

    Args:
        root: the powercap class directory; tests pass a fake tree.

    Raises:
        EnergyUnavailable: the tree is missing, has no package domain, or a counter is unreadable
            (on many distributions energy_uj is readable only by root since CVE-2020-8694).
    """
    if not root.is_dir():
        raise EnergyUnavailable(f"{root} does not exist on this machine (no RAPL powercap driver exposed)")
    zones = sorted(path for path in root.glob("intel-rapl:*") if path.name.count(":") == 1)
    if not zones:
        raise EnergyUnavailable(f"{root} has no intel-rapl package domain on this machine")
    domains = []
    for zone in zones:
        name = _read_text(zone / "name") or zone.name
        if not name.startswith("package"):
            continue
        domain = RaplDomain(name, zone / "energy_uj", int(_read_text(zone / "max_energy_range_uj") or 0))
        try:
            domain.read_uj()
        except PermissionError:
            raise EnergyUnavailable(f"{domain.energy_file} is readable only by root") from None
        except (OSError, ValueError) as exc:
            raise EnergyUnavailable(f"{domain.energy_file} cannot be read: {exc}") from None
        domains.append(domain)
    if not domains:
        raise EnergyUnavailable(f"{root} has no intel-rapl package domain on this machine")
    return domains


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


class RaplMeter(EnergyMeter):
    """The package domains' counters, summed."""

    SOURCE: ClassVar[str] = "rapl"

    def __init__(self, domains: list[RaplDomain]) -> None:
        self.domains = domains

    def read(self) -> tuple[int, ...]:
        return tuple(domain.read_uj() for domain in self.domains)

    def joules_between(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        # zip(strict=) is Python 3.10+; the runtime runs on 3.9, and both readings come from read().
        return sum(d.delta_uj(b, a) for d, b, a in zip(self.domains, before, after)) * _MICRO  # noqa: B905


class NvmlMeter(EnergyMeter):
    """One GPU's total energy counter through NVML (nvidia-ml-py), in millijoules."""

    SOURCE: ClassVar[str] = "nvml"

    def __init__(self, gpu_index: int) -> None:
        try:
            import pynvml
        except ImportError:
            raise EnergyUnavailable("NVML is not installed (pip install nvidia-ml-py)") from None
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except pynvml.NVMLError as exc:
            raise EnergyUnavailable(f"NVML has no energy counter for GPU {gpu_index}: {exc}") from None
        self._pynvml = pynvml

    def read(self) -> tuple[int, ...]:
        return (int(self._pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)),)

    def joules_between(self, before: tuple[int, ...], after: tuple[int, ...]) -> float:
        return (after[0] - before[0]) * _MILLI

    def close(self) -> None:
        # NVML counts its initialisations: an inline runner's jobs each open and close one.
        self._pynvml.nvmlShutdown()


def open_energy_meter(device: str, powercap_root: Path = POWERCAP_ROOT) -> EnergyMeter:
    """The meter for an evaluation on `device`: NVML for a CUDA device, RAPL otherwise.

    Raises:
        EnergyUnavailable: with the reason no counter is readable.
    """
    if device.startswith("cuda"):
        return NvmlMeter(int(device.partition(":")[2] or 0))
    return RaplMeter(rapl_package_domains(powercap_root))


def energy_section(joules: float, samples: int, source: str) -> Energy:
    """The `energy` section of a measurement: {"joules_per_inference", "joules", "samples", "source"}
    (an inference is one sample)."""
    return {
        "joules_per_inference": joules / samples if samples > 0 else None,
        "joules": round(joules, 6),
        "samples": samples,
        "source": source,
    }
