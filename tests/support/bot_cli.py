"""``python -m bot`` started as an operator starts it, with a settings environment of the
test's: for the checks that must refuse a start in one line (exit 2) before anything is
created.

The process is forked from the suite's fork server (:mod:`tests.support.forked`): its own
pid, environment, working directory, standard streams and exit code, without the ~2 s of
CPU a fresh interpreter spends importing (``fresh=True`` execs one, for a test of what
the start imports)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.forked import run_module

__all__ = ["TOKEN", "Started", "start_bot_with_env"]

#: The bot token of the base environment: well-formed, never printed by a refusal.
TOKEN = "123456:" + "A" * 35


@dataclass(frozen=True, slots=True)
class Started:
    """What a start printed and how it ended.

    Attributes:
        returncode: the process's exit code.
        stderr_lines: standard error, stripped, split in lines.
        output: standard output and standard error together (for "never printed").
        database: the SQLite file the base environment names (a refused start
            creates none).
    """

    returncode: int
    stderr_lines: list[str]
    output: str
    database: Path


def start_bot_with_env(
    directory: Path,
    env: Mapping[str, str],
    args: Sequence[str] = (),
    *,
    timeout_s: float = 120.0,
    fresh: bool = False,
) -> Started:
    """Run ``python -m bot *args`` in ``directory`` (its working directory: a ``.env``
    there is read, the repository's is not) with a minimal valid environment — a
    token, a Groq key, a SQLite file in ``directory`` — updated with ``env``. Nothing
    else of this process's environment is passed but ``PATH``.

    Raises:
        TimeoutError: it ran longer than ``timeout_s`` (a start that was not refused
            waits for Telegram); ``subprocess.TimeoutExpired`` with ``fresh``.
    """
    database = directory / "kopek.db"
    base = {
        "PATH": os.environ.get("PATH", ""),
        "BOT_TOKEN": TOKEN,
        "GROQ_API_KEY": "gsk_trial",
        "DATABASE_URL": f"sqlite+aiosqlite:///{database}",
    }
    if not fresh:
        code, out, err = asyncio.run(
            run_module("bot", args, env={**base, **env}, cwd=directory, timeout=timeout_s)
        )
        return Started(code, err.strip().splitlines(), out + err, database)
    done = subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=directory,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return Started(
        done.returncode, done.stderr.strip().splitlines(), done.stdout + done.stderr, database
    )
