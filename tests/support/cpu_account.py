"""A pytest plugin that accounts the suite's CPU per test (opt-in, for measuring).

``pytest -p tests.support.cpu_account -n 4 …`` with ``KOPEK_CPU_ACCOUNT=<folder>``: each
pytest process (every xdist worker, or the one process with ``-n 0``) writes
``<folder>/<worker>.jsonl``, one JSON object per test and phase-summed: ``nodeid``,
``self`` (CPU seconds of this process, every thread: ``time.process_time``), ``children``
(CPU seconds of this process's children reaped meanwhile: ``RUSAGE_CHILDREN``, e.g. pip or
a fresh interpreter), ``pg`` (CPU seconds of this process's PostgreSQL server: the
postmaster's own and reaped children's ticks plus its live backends', from ``/proc``)
and ``wall``; plus one ``{"collection": s}`` line (CPU seconds before the first test).
``python -m tests.support.cpu_account <folder>`` prints the totals, the files by CPU and
the slowest tests. Linux only (``/proc``); elsewhere ``pg`` is 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[str, list[str]] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    return name, text[text.rindex(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(p) for p in (task / "children").read_text().split()]
    return found


def _pg_ticks() -> int:
    """Ticks of every ``postgres`` child of this process, with its reaped and live children."""
    total = 0
    for pid in _children(os.getpid()):
        stat = _stat(pid)
        if stat is None or stat[0] != "postgres":
            continue
        fields = stat[1]
        # fields after the name start at "state" (field 3): utime=14 .. cstime=17
        total += sum(int(fields[i]) for i in range(11, 15))
        for child in _children(pid):
            cstat = _stat(child)
            if cstat is not None:
                total += int(cstat[1][11]) + int(cstat[1][12])
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class _Account:
    def __init__(self, folder: Path, worker: str) -> None:
        self.out = (folder / f"{worker}.jsonl").open("a")
        self.started = False

    def write(self, row: dict[str, Any]) -> None:
        self.out.write(json.dumps(row) + "\n")
        self.out.flush()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, None, None]:
        if not self.started:
            self.started = True
            self.write({"collection": time.process_time(), "pg": _pg_ticks() / _TICK})
        before = (time.process_time(), _children_cpu(), _pg_ticks(), time.monotonic())
        yield
        self.write(
            {
                "nodeid": item.nodeid,
                "self": time.process_time() - before[0],
                "children": _children_cpu() - before[1],
                "pg": (_pg_ticks() - before[2]) / _TICK,
                "wall": time.monotonic() - before[3],
            }
        )

    def pytest_unconfigure(self) -> None:
        self.write({"end": time.process_time(), "children_total": _children_cpu()})
        self.out.close()


def pytest_configure(config: pytest.Config) -> None:
    """Register the account when ``KOPEK_CPU_ACCOUNT`` names a folder (not in a controller
    of xdist workers, which runs no test)."""
    folder = os.environ.get("KOPEK_CPU_ACCOUNT")
    if not folder or (
        getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput")
    ):
        return
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    Path(folder).mkdir(parents=True, exist_ok=True)
    config.pluginmanager.register(_Account(Path(folder), worker), "kopek-cpu-account")


def _report(folder: Path, top: int) -> None:
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    tests: list[tuple[float, str, float, float, float]] = []
    collection = 0.0
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "collection" in row:
                collection += row["collection"]
                continue
            if "nodeid" not in row:
                continue
            if row["pg"] < 0:  # the server stopped (session teardown): reaped as a child
                row["children"] += row["pg"]
                row["pg"] = 0.0
            cpu = row["self"] + row["children"] + row["pg"]
            acc = files[row["nodeid"].split("::")[0]]
            for i, key in enumerate(("self", "children", "pg", "wall")):
                acc[i] += row[key]
            tests.append((cpu, row["nodeid"], row["self"], row["children"], row["pg"]))
    sums = [sum(v[i] for v in files.values()) for i in range(4)]
    print(f"collection (all workers) {collection:7.1f} s CPU")
    print(
        f"tests: self {sums[0]:.1f}  children {sums[1]:.1f}  pg {sums[2]:.1f}  "
        f"= {sums[0] + sums[1] + sums[2]:.1f} s CPU  ({len(tests)} tests, wall {sums[3]:.0f})"
    )
    print(f"\n{'cpu':>7} {'self':>7} {'child':>7} {'pg':>6} {'wall':>6}  file")
    ranked = sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1] + kv[1][2]))
    for name, (own, child, pg, wall) in ranked[:top]:
        print(f"{own + child + pg:7.1f} {own:7.1f} {child:7.1f} {pg:6.1f} {wall:6.1f}  {name}")
    print(f"\n{'cpu':>7} {'self':>7} {'child':>7} {'pg':>6}  test")
    for cpu, nodeid, own, child, pg in sorted(tests, reverse=True)[:top]:
        print(f"{cpu:7.2f} {own:7.2f} {child:7.2f} {pg:6.2f}  {nodeid}")


if __name__ == "__main__":
    _report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 50)
