"""The built wheel is the whole bot: installed into a fresh venv outside the repository,
``kopek`` migrates from the packaged scripts and polls the fake Bot API.

Offline and quick: the wheel is built by the project's build backend (setuptools from the
project's venv, called through its PEP 517 hook as ``pip wheel --no-build-isolation``
would call it, without pip's own start), installed offline without dependencies by the
installer ``make install`` uses (uv, from the project's venv; pip where there is no uv),
and the new venv sees the project venv's dependencies through a ``.pth`` line (not its
editable install of Kopek: ``.pth`` files inside that folder are not processed, so
``bot`` comes from the wheel). Measured on the 2-core machine: ``pip wheel`` 2.8 s of
CPU against 1.2 s for the hook, ``pip install`` 2.3 s against 0.2 s for ``uv pip
install``.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from tests.support.harness import REPO_ROOT, BotFactory
from tests.support.telegram import FakeTelegram


def _run(*argv: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _build_wheel(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, src / name)
    for package in ("bot", "llm", "budget", "scheduler"):
        shutil.copytree(
            REPO_ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    dist = tmp_path / "dist"
    hook = f"import setuptools.build_meta as backend; backend.build_wheel({str(dist)!r})"
    _run(sys.executable, "-c", hook, cwd=src)
    [wheel] = dist.glob("kopek-*.whl")
    return wheel


def _venv_with(wheel: Path, tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = _run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
    ).strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(purelib) / "kopek_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    uv = Path(sys.executable).with_name("uv")
    if uv.exists():
        install: tuple[str | Path, ...] = (uv, "pip", "install", "--offline", "--python", python)
    else:
        install = (sys.executable, "-m", "pip", "--python", python, "install", "--no-index")
    _run(*install, "--quiet", "--no-deps", wheel, cwd=tmp_path)
    return venv


async def test_wheel_installs_and_kopek_runs_to_its_first_get_updates(
    tmp_path: Path, bot_factory: BotFactory, fake_telegram: FakeTelegram, bot_env: dict[str, str]
) -> None:
    """The wheel carries the migrations and the dashboard's files; installed outside the
    repository, the ``kopek`` script imports the installed package, migrates a new
    database, calls getUpdates and exits 0 on SIGTERM."""
    wheel = _build_wheel(tmp_path)
    # the file README's install instructions name
    assert f"{wheel.name}[chart]" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    names = zipfile.ZipFile(wheel).namelist()
    assert "bot/migrations/env.py" in names
    assert "bot/migrations/versions/0001_ledger.py" in names
    static = "bot/ops/dashboard/static/"  # the dashboard's page, served from the package
    for name in ("index.html", "dashboard.js", "dashboard.css", "uPlot.iife.min.js"):
        assert static + name in names, name
    assert static + "uPlot-LICENSE.txt" in names  # MIT: the notice travels with the copy
    assert any(n.endswith("entry_points.txt") for n in names)

    venv = _venv_with(wheel, tmp_path)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    where = _run(venv / "bin" / "python", "-c", "import bot; print(bot.__file__)", cwd=run_dir)
    assert where.startswith(str(venv)), where

    env = {k: v for k, v in bot_env.items() if k != "PYTHONPATH"}
    kopek = bot_factory(argv=[str(venv / "bin" / "kopek")], env=env, cwd=run_dir)
    await kopek.start()
    assert fake_telegram.requests("getUpdates")
    assert await kopek.stop() == 0
    database = Path(env["DATABASE_URL"].removeprefix("sqlite+aiosqlite:///"))
    assert (await asyncio.to_thread(database.stat)).st_size > 0
