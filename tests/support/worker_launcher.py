"""Start a pytest-xdist worker as a fork of the fork server (:mod:`tests.support.zygote`).

pytest-xdist starts each worker as ``PYTHON -c BOOTSTRAP`` (execnet's ``popen``
gateway) and talks to it over its stdin and stdout. ``tests/conftest.py`` names this
script as that ``PYTHON`` (``--tx popen//python=…``): it asks the fork server, which has
imported aiogram and the bot once, for a child that runs :mod:`tests.support.xdist_boot`
(execnet's bootstrap) on this process's stdin, stdout and stderr, in this process's
environment and working directory, then waits for it and exits with its code. A worker
then skips the imports a fresh interpreter pays before collecting (measured: 12 s of
CPU a worker's collection, about half of it ``import aiogram`` building aiogram's
pydantic schemas; see docs/testing.md).

Standard library only (run as ``python -I -S``: this process starts in ~20 ms). It ends
with its worker: a signal it gets (SIGINT, SIGTERM) is passed on; if it is killed, the
fork server sees the connection close and kills the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time

#: seconds to wait for the fork server to listen (it imports first: ~5 s on 2 cores,
#: far more when other suites share the machine)
START_TIMEOUT_S = 180.0


def _connect(path: str) -> socket.socket:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        else:
            return sock


def main() -> int:
    """Run one worker; its exit code (128 + N for a death by signal N, as a shell says)."""
    path = os.environ["KOPEK_TEST_FORK_SERVER"]
    sock = _connect(path)
    request = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    request["module"] = "tests.support.xdist_boot"
    body = json.dumps(request).encode()
    header = struct.pack(">I", len(body))
    socket.send_fds(sock, [header + body], [0, 1, 2])
    lines = sock.makefile("rb")
    pid = int(json.loads(lines.readline())["pid"])

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    line = lines.readline()
    if not line:  # the server is gone
        return 1
    code = int(json.loads(line)["exit"])
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
