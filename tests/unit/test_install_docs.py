"""The operator's install instructions work as typed (trial 15, finding 10): README said
``pip install 'kopek[chart]'``, which fails on a server (Kopek is not on PyPI) and left
out the constraints."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_README = (ROOT / "README.md").read_text(encoding="utf-8")
_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_readme_installs_the_built_wheel_with_the_constraints() -> None:
    wheel = f"kopek-{_PROJECT['version']}-py3-none-any.whl"
    assert "`pip wheel --no-deps -w dist .`" in _README
    assert f"`dist/{wheel}`" in _README
    assert f"`pip install -c constraints.txt './{wheel}[chart]'`" in _README
    assert "`pip install -c constraints.txt '.[chart]'`" in _README
    assert "chart" in _PROJECT["optional-dependencies"]


def test_readme_no_longer_says_to_install_kopek_from_the_registry() -> None:
    """Every ``pip install`` of Kopek in README installs a file or the clone, except the
    one that adds the extra to a venv where the wheel is already installed."""
    commands = re.findall(r"`(pip install [^`]*kopek[^`]*)`", _README)
    assert commands
    for command in commands:
        assert "-c constraints.txt" in command or "in that venv" in _README, command
    assert "`pip install 'kopek[chart]'` from a" not in _README
