"""A model that does nothing, for benchmarks of what surrounds inference (dispatch, harness)."""

from __future__ import annotations

import torch


def identity() -> torch.nn.Module:
    return torch.nn.Identity()
