"""The operator's install instructions work as typed.
They live in ``docs/deploy.md`` ("The wheel"); the README's Deploy section gives the same
commands in short, and no document tells anyone to install Kopek from the registry.

README said ``pip install 'kopek[chart]'``, which fails on a server (Kopek is not on PyPI)
and left out the constraints. ``/budget chart`` without matplotlib named only the venv's
fix and a developer's hint; a container needs the Dockerfile's ``EXTRAS`` build
argument."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from bot.ops.chart import CHART_MISSING
from tests.support.docs import DOCS, README, doc_files

ROOT = Path(__file__).resolve().parents[2]
_DEPLOY = (DOCS / "deploy.md").read_text(encoding="utf-8")
_README = README.read_text(encoding="utf-8")
_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_deploy_doc_installs_the_built_wheel_with_the_constraints() -> None:
    wheel = f"kopek-{_PROJECT['version']}-py3-none-any.whl"
    assert "`pip wheel --no-deps -w dist .`" in _DEPLOY
    assert f"`dist/{wheel}`" in _DEPLOY
    assert f"`pip install -c constraints.txt './{wheel}[chart]'`" in _DEPLOY
    assert "`pip install -c constraints.txt '.[chart]'`" in _DEPLOY
    assert "chart" in _PROJECT["optional-dependencies"]


def test_the_readme_deploys_the_same_wheel() -> None:
    wheel = f"kopek-{_PROJECT['version']}-py3-none-any.whl"
    assert "pip wheel --no-deps -w dist ." in _README
    assert f"pip install -c constraints.txt './{wheel}[chart]'" in _README


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_no_document_says_to_install_kopek_from_the_registry(path: Path) -> None:
    """Every ``pip install`` of Kopek in a document installs a file or the clone, except
    the one that adds the extra to a venv where the wheel is already installed."""
    text = path.read_text(encoding="utf-8")
    commands = re.findall(r"`(pip install [^`]*kopek[^`]*)`", text)
    for command in commands:
        assert "-c constraints.txt" in command or "in that venv" in text, command
    assert "`pip install 'kopek[chart]'` from a" not in text


def test_the_install_commands_are_found() -> None:
    """The deploy doc has the commands the test above judges (it cannot pass on none)."""
    assert re.findall(r"`(pip install [^`]*kopek[^`]*)`", _DEPLOY)


def test_the_chart_hint_names_the_containers_build_argument() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^ARG EXTRAS=", dockerfile, re.MULTILINE)
    assert "${EXTRAS:+[$EXTRAS]}" in dockerfile
    assert "docker build --build-arg EXTRAS=chart" in CHART_MISSING
    assert "pip install 'kopek[chart]'" in CHART_MISSING
    assert "make install" not in CHART_MISSING
