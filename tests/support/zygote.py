"""A fork server for bot processes: ``python -m bot`` without paying its imports each time.

Every bot process a test starts used to spend ~4.5 s of CPU importing before its first
line of its own work (measured on the 2-core machine: ``import aiogram`` 3.4 s, most of
it pydantic building the schemas of aiogram's ~630 Telegram types; ``import bot.app``
4.6 s in all). This server (one for a whole xdist session, or one for a lone pytest
process) imports those modules once and then ``fork()``s a child for each bot run. The
child is a real process of its own: its own pid, signals (SIGTERM grace, SIGKILL as a
crash), exit code, file descriptors, working directory and environment; it runs
``bot/__main__.py`` as ``__main__`` the way ``python -m bot`` does and ends with the
interpreter's normal shutdown. What it skips is the import work, which the server did
before any bot code ran. Tests of the start itself (what a process imports, the console
script of an installed wheel) exec a fresh interpreter instead
(:class:`tests.support.harness.BotProcess` with ``fresh=True``).

What a forked child inherits from the server and a fresh interpreter would not: the
interpreter's start-up settings (``PYTHONWARNINGS``, ``PYTHONHASHSEED``,
``PYTHONIOENCODING``, ``-X`` options, the locale: the server's, not those in the child's
environment), the modules in :data:`PRELOAD` (the LLM SDKs and Alembic are imported even
for a run without provider keys, so an import missing from the start cannot fail here:
``tests/project/test_light_imports.py``, the wheel test and the fresh run of
``tests/e2e/test_foundation.py`` exec), and its command line in ``ps``.

Protocol (one connection a child, AF_UNIX stream): the client sends a 4-byte big-endian
length, then that many bytes of JSON ``{"argv": [...], "env": {...}, "cwd": "..."}``
(``argv``: the arguments after ``-m bot``; with ``"module": NAME``, after ``-m NAME``;
with ``"script": PATH``, after ``python PATH``; with ``"nofile": N``, the child's
descriptor limit, soft and hard, is N, as ``prlimit --nofile=N`` would set it),
with the child's stdin, stdout and stderr as three descriptors (SCM_RIGHTS) on the first
bytes. The server answers one JSON line ``{"pid": N}`` after the fork and one
``{"exit": code}`` when the child has ended (``code`` as
:func:`os.waitstatus_to_exitcode` gives it: ``-signal`` for a death by signal). A client
that closes its connection first gets its child SIGKILLed. The server ends (killing its
children) when its stdin reaches EOF, i.e. when the pytest process that started it is gone.

Run as ``python -m tests.support.zygote SOCKET_PATH [--bare]`` (``--bare``: no preloading);
it prints ``ready`` once listening. Its children die with it however it ends
(``PR_SET_PDEATHSIG``), and every signal sent to a child is delivered (see
:func:`_fork`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import resource
import runpy
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
import traceback

#: What a Kopek process imports before it reads its settings, plus what the run imports
#: on the way to its first ``getUpdates`` (the LLM SDKs are imported only for providers
#: with a key, so a run with keys pays for them: preloaded here too).
PRELOAD = (
    "aiogram",
    "bot.settings",
    "bot.ops.logs",
    "bot.app.polling",
    "bot.app",
    "llm.cascade.factory",
    "groq",
    "mistralai",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "asyncpg",
    "budget.storage.postgres.store",
)

_HEADER = struct.Struct(">I")


def _read_request(conn: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < _HEADER.size:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("request cut short")
        data += more
    (length,) = _HEADER.unpack_from(data)
    body = data[_HEADER.size :]
    while len(body) < length:
        more = conn.recv(1 << 16)
        if not more:
            raise EOFError("request cut short")
        body += more
    if len(fds) != 3:
        raise ValueError(f"expected 3 descriptors, got {len(fds)}")
    request = json.loads(body[:length])
    if not isinstance(request, dict):
        raise ValueError("request is not an object")
    return request, list(fds)


#: Linux's ``prctl`` option that sends the calling process a signal when its parent dies
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)
#: every signal a handler can see: blocked around ``fork()`` (see :func:`_fork`)
_CATCHABLE = signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}


def _fork() -> int:
    """``os.fork()`` with every signal blocked across it; the child keeps them blocked
    until :func:`_child` runs the bot. A signal that reached the child in the fork's
    own window would otherwise be dropped: CPython forgets the signals its C handler
    noted before its after-fork work in the child, and a test's early SIGINT would
    vanish where a real ``python -m bot`` dies of it. Blocked, it stays pending in the
    kernel and is delivered when the child unblocks."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _CATCHABLE)
    pid = os.fork()
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    else:
        global _UNBLOCK
        _UNBLOCK = previous
    return pid


_UNBLOCK: set[int | signal.Signals] = set()


def _die_with(server_pid: int) -> None:
    """SIGKILL this child when the server dies, however it dies (``PR_SET_PDEATHSIG``);
    if it is already gone, exit now."""
    if _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != server_pid:
        os._exit(1)


def _exit_by_sigint() -> None:
    """What CPython does with a KeyboardInterrupt nobody caught: die of SIGINT (exit
    code -2 to the parent) after its traceback; logging and stdio are flushed first."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)


def _child(request: dict[str, object], fds: list[int]) -> int:
    """Become the bot process; returns its exit code (the caller exits with it)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    env = request["env"]
    argv = request["argv"]
    cwd = request["cwd"]
    assert isinstance(env, dict) and isinstance(argv, list) and isinstance(cwd, str)
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    time.tzset()
    os.chdir(cwd)
    nofile = request.get("nofile")
    if isinstance(nofile, int):  # as ``prlimit --nofile=N`` before an exec would
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    script = request.get("script")
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, _UNBLOCK)  # pending signals land here
        if isinstance(script, str):  # ``python SCRIPT ARGS``
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            sys.argv = [script, *[str(a) for a in argv]]
            runpy.run_path(script, run_name="__main__")
        else:  # ``python -m MODULE ARGS`` (``bot`` unless asked)
            module = request.get("module", "bot")
            assert isinstance(module, str)
            sys.path[0] = cwd  # what ``python -m`` puts first
            sys.argv = ["-m", *[str(a) for a in argv]]
            # run fresh, as ``python -m`` does: a package's __main__, a plain module itself
            sys.modules.pop(f"{module}.__main__", None)
            if not hasattr(sys.modules.get(module), "__path__"):
                sys.modules.pop(module, None)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        _exit_by_sigint()
        return 1  # not reached: SIGINT's default action ends the process
    except BaseException:  # the interpreter's own top level: its hook, then exit 1
        sys.excepthook(*sys.exc_info())
        return 1
    return 0


def _take_sigint() -> None:
    """SIGINT raises KeyboardInterrupt here and in every child, as in a ``python`` started
    from a terminal, however the suite was started: a shell runs a background job
    (``make test &``, ``nohup``) with SIGINT ignored, Python then leaves it ignored, the
    children inherit that, and a test's SIGINT to a child was lost (the sleeper of
    ``tests/e2e/test_fork_server.py`` ran out its 30 s)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def serve(path: str, *, preload: bool = True) -> int:
    """Preload (unless not ``preload``: a server for scripts that need nothing), listen on
    ``path``, fork a child per request. Returns 0 in the server when its stdin closes; in
    a child, the child's exit code."""
    _take_sigint()
    for name in PRELOAD if preload else ():
        importlib.import_module(name)
    gc.collect()
    gc.freeze()  # the preloaded objects stay shared pages in every child
    if threading.active_count() != 1:  # a fork would copy a half-held lock
        raise RuntimeError(f"preloading started threads: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    try:
        while True:
            watched = [listener, sys.stdin, *children.values()]
            readable, _, _ = select.select(watched, [], [], 0.05)
            if sys.stdin in readable and not os.read(sys.stdin.fileno(), 1):
                return 0
            if listener in readable:
                conn, _ = listener.accept()
                try:
                    request, fds = _read_request(conn)
                except (OSError, ValueError, EOFError):
                    traceback.print_exc()
                    conn.close()
                else:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = _fork()
                    if pid == 0:
                        _die_with(_SERVER_PID)
                        listener.close()
                        conn.close()
                        for other in children.values():
                            other.close()
                        return _child(request, fds)
                    for fd in fds:
                        os.close(fd)
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                    children[pid] = conn
            for pid, conn in list(children.items()):
                if conn in readable and not conn.recv(1):  # the client is gone
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            while children:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                conn = children.pop(pid)
                with contextlib.suppress(OSError):
                    code = os.waitstatus_to_exitcode(status)
                    conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
                conn.close()
    finally:
        if os.getpid() == _SERVER_PID:
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            folder = os.path.dirname(path)  # made for it by tests/support/forked.py
            if os.path.basename(folder).startswith("kopek-zygote-"):
                shutil.rmtree(folder, ignore_errors=True)  # even if the client was killed


_SERVER_PID = os.getpid()

if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], preload="--bare" not in sys.argv[2:]))
