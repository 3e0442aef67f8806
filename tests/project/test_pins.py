"""What a clean clone installs.

``filterwarnings = ["error"]`` makes a deprecation warning a failure, so the test
runner and its plugins are pinned in ``constraints.txt`` like the tools: a new release
cannot turn a clean clone red. Every third-party module the bot's code imports is a
declared dependency, not a package that only happens to arrive through another."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
_PROJECT = _PYPROJECT["project"]
_OWN = {"bot", "llm", "budget", "scheduler"}


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[canonicalize_name(name)] = version
    return pins


def _requirements(*groups: str) -> dict[str, Requirement]:
    found = [Requirement(r) for r in _PROJECT["dependencies"]]
    for group in groups:
        found += [Requirement(r) for r in _PROJECT["optional-dependencies"][group]]
    return {canonicalize_name(r.name): r for r in found}


@pytest.mark.parametrize(
    "name", ["pytest", "pluggy", "pytest-asyncio", "pytest-xdist", "hypothesis", "ruff", "mypy"]
)
def test_the_runner_and_the_tools_are_pinned_and_installed_at_the_pin(name: str) -> None:
    pins = _pins()
    assert name in pins, f"{name} is not pinned in constraints.txt"
    assert importlib.metadata.version(name) == pins[name], (
        f"{name} {importlib.metadata.version(name)} installed, {pins[name]} pinned: "
        "run make install"
    )


def test_every_pin_satisfies_pyprojects_bounds() -> None:
    """A pin outside a declared range would make ``pip install -c constraints.txt`` fail."""
    wanted = _requirements("test", "chart")
    for name, version in _pins().items():
        if name in wanted:
            assert wanted[name].specifier.contains(version, prereleases=True), (name, version)


def _imported_top_modules() -> set[str]:
    modules: set[str] = set()
    for package in sorted(_OWN):
        for file in (ROOT / package).rglob("*.py"):
            if "migrations" in file.parts and "versions" in file.parts:
                continue
            for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    modules.update(alias.name.partition(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    modules.add(node.module.partition(".")[0])
    return modules - _OWN - set(sys.stdlib_module_names) - {"__future__"}


def test_every_module_the_code_imports_is_a_declared_dependency() -> None:
    """aiohttp and httpcore used to arrive only through aiogram and httpx."""
    declared = set(_requirements("chart"))
    by_module = importlib.metadata.packages_distributions()
    missing = []
    for module in sorted(_imported_top_modules()):
        dists = {canonicalize_name(d) for d in by_module.get(module, [])}
        assert dists, f"{module}: no installed distribution provides it"
        if not dists & declared:
            missing.append(f"{module} ({', '.join(sorted(dists))})")
    assert missing == [], "imported but not in [project] dependencies: " + ", ".join(missing)
