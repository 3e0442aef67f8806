"""``bench/ledger.py``'s command line: ``--help`` and an unknown argument
ran the whole 40 s SQLite benchmark, and ``--backend=postgres`` benchmarked SQLite."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.ledger import parse_args
from tests.support.harness import REPO_ROOT


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "bench/ledger.py", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_prints_the_usage_and_runs_nothing() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: bench/ledger.py")
    assert "--backend" in done.stdout and "synchronous mode:" not in done.stdout


def test_an_unknown_argument_is_a_usage_error() -> None:
    done = _run("--bogus")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: bench/ledger.py") and done.stdout == ""
    for argv in (["--backend", "mysql"], ["SLOW"], ["--backend", "postgres", "FULL"]):
        with pytest.raises(SystemExit) as info:
            parse_args(argv)
        assert info.value.code == 2


def test_every_spelling_of_the_backend_and_mode_is_read() -> None:
    assert parse_args(["--backend=postgres"]).backend == "postgres"
    assert parse_args(["--backend", "postgres"]).backend == "postgres"
    assert parse_args(["normal"]).sync == "NORMAL"
    default = parse_args([])
    assert (default.backend, default.sync) == ("sqlite", None)
