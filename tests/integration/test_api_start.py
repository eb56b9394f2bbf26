"""`mlscope api` as a person starts it: its log names the dashboard's URL in one line, and the libraries'
INFO chatter (Alembic's migration context) is left out unless `--verbose` asks for it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mlscope.api.app import dashboard_url
from tests.integration.farm import free_port, wait_until

REDIS_URL = "redis://127.0.0.1:6379/13"


def _started_log(env: dict[str, str], log_path: Path, *flags: str) -> str:
    """The log of `mlscope api` from its start until it serves, then stopped."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlscope", "api", "--port", str(port), *flags],
            env={**env, "MLSCOPE_BROKER_URL": REDIS_URL, "MLSCOPE_REGISTRY_URL": REDIS_URL},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: process.poll() is not None or "Serving on" in log_path.read_text(), 60, "the api to serve"
        )
        assert process.poll() is None, log_path.read_text()
    finally:
        process.terminate()
        process.wait(timeout=30)
    return log_path.read_text().replace(str(port), "PORT")


def test_the_api_names_its_dashboard_once_and_keeps_alembic_quiet_unless_verbose(
    mlscope_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a new store, which the api migrates when it starts
    # When `mlscope api` starts plainly, then with --verbose on a new store again
    plain = _started_log(mlscope_env, tmp_path / "plain.log")
    (tmp_path / "store.db").unlink()
    verbose = _started_log(mlscope_env, tmp_path / "verbose.log", "--verbose")

    # Then the plain start names the dashboard in one line and prints no Alembic line
    named = [line for line in plain.splitlines() if "dashboard at http://127.0.0.1:PORT/" in line]
    assert len(named) == 1, plain
    assert "alembic" not in plain.lower(), plain
    # And --verbose shows what Alembic did
    assert "INFO alembic" in verbose, verbose


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000/"),
        ("0.0.0.0", "http://127.0.0.1:8000/"),
        ("::", "http://[::1]:8000/"),
        ("farm.example", "http://farm.example:8000/"),
    ],
)
def test_the_dashboard_url_is_one_a_browser_on_this_machine_opens(host: str, url: str) -> None:
    assert dashboard_url(host, 8000) == url


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_api_stops_through_its_clean_up_on_sigint_even_inherited_ignored_and_on_sigterm(
    mlscope_env: dict[str, str], tmp_path: Path, sig: signal.Signals
) -> None:
    # Given `mlscope api` started as a test runner's worker or a background job starts it: SIGINT
    # ignored, which a process inherits (and Python then leaves so)
    port, log_path = free_port(), tmp_path / "api.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "mlscope", "api", "--port", str(port)],
            env={**mlscope_env, "MLSCOPE_BROKER_URL": REDIS_URL, "MLSCOPE_REGISTRY_URL": REDIS_URL},
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
    try:
        wait_until(
            lambda: process.poll() is not None or "Serving on" in log_path.read_text(), 60, "the api to serve"
        )
        assert process.poll() is None, log_path.read_text()
        # When it is sent the signal
        process.send_signal(sig)
        # Then it ends by itself, through Python's clean-up (not killed by the signal), in seconds
        code = process.wait(timeout=15)
        assert code >= 0, f"ended by signal {-code}: {log_path.read_text()}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
