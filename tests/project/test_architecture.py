"""The house rules, checked on the source (``docs/architecture.md``, "Layers").

* Layers import one way: ``budget.kernel`` (imports nothing of the project) ← ``budget`` ←
  ``llm`` ← ``scheduler`` ← ``bot``. A module may import its own layer and the layers below.
* No import cycle between modules, whatever the kind of import (module level, inside a
  function, or only for type checking): a cycle is a tangle a reader cannot start from.
* ``budget``, ``llm`` and ``scheduler`` never import aiogram (Telegram is the bot's business).
* Sizes: no product module over :data:`MAX_MODULE_LINES` lines, no function over
  :data:`MAX_FUNCTION_LINES` (nested functions count on their own; the outer one includes them).
* No history in code: no product module, test, benchmark or document (decision records
  aside) cites a review round ("issue N", "trial N", "finding N", "FN", "§N of issue N") in
  a name, docstring, comment or string; a decision worth keeping is in ``docs/decisions/``
  and a comment cites that file. Test files and test functions are named by behaviour.

Everything is read with :mod:`ast` or as text from the files, so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bot", "budget", "llm", "scheduler")
#: lowest first; a module may import its own layer and every layer before it
LAYERS = ("budget.kernel", "budget", "llm", "scheduler", "bot")
NO_AIOGRAM = ("budget", "llm", "scheduler")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
#: A review round cited (N a number): "issue N", "issue_N", "issue #N", "Trial of issue N",
#: "trial Nb", "trial-Nb", "finding N", "review round N", "FN" (a finding's number, one or
#: two digits: a lint code such as F401 has three, a PDF font is "/FN"), "§N" (a standard's
#: section, "RFC N §N", is told apart by :data:`STANDARD`). "pypdf's issue-N sample" names
#: another project's file. The test below plants each shape.
CITATION = re.compile(
    r"(?i:(?<![a-z0-9])(?:issues?|findings?)[\s_#]*\d"
    r"|(?<![a-z0-9])trials?[\s_-]*(?:of\s+issues?\s+)?\d"
    r"|\breview\s+rounds?\s*\d)"
    r"|(?<![/#\w])F\d{1,2}\b"
    r"|§\s*\d"
)
#: A standard named earlier on the line makes its "§" a section of that standard.
STANDARD = re.compile(r"\b(?:RFC|ISO|IEC|ECMA|PEP)\b")
#: Where history may not be: code, tests, benchmarks, the operator's documents and build
#: files (``docs/decisions/`` keeps the story of a decision; ``tests/fixtures/`` holds other
#: projects' samples and their provenance, "test ``issue_N``" of theirs, so only its Python
#: is scanned; the Alembic revisions are scanned too: they say what a revision does).
CITATION_SCOPE = ("bot", "budget", "llm", "scheduler", "tests", "bench", "docs", "deploy", ".ci")
CITATION_FILES = ("README.md", "Makefile", "Dockerfile", "compose.yaml", "pyproject.toml")
CITATION_SUFFIXES = frozenset({".py", ".md", ".yaml", ".yml", ".toml", ".json", ".sh", ""})

#: Offenders still being folded; each entry must still offend (so the list only shrinks).
OVERSIZED_MODULES: frozenset[str] = frozenset()
OVERLONG_FUNCTIONS: frozenset[str] = frozenset()
CYCLES_LEFT: frozenset[frozenset[str]] = frozenset()
#: Upward imports still being folded ("importer -> imported").
UPWARD_LEFT: frozenset[str] = frozenset()
#: Files that still cite a review round.
HISTORY_LEFT: frozenset[str] = frozenset()
#: Files exempt from the citation scan: none (nothing is ever added to it).
HISTORY_ELSEWHERE: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` (both dotted module names) at ``line``."""

    importer: str
    imported: str
    line: int


def product_files() -> dict[str, Path]:
    """Dotted module name → file, for every product module (Alembic revisions aside:
    they are frozen history, run by Alembic, never imported by the code)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[:3] == ("bot", "migrations", "versions"):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> Iterator[Edge]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield Edge(name, target, node.lineno)


def import_graph() -> dict[str, set[str]]:
    modules = product_files()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        graph.setdefault(name, set())
        for edge in _imports(name, path, modules):
            graph[name].add(edge.imported)
    return graph


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the most specific layer ``module`` is in."""
    best = -1
    for index, prefix in enumerate(LAYERS):
        if (module == prefix or module.startswith(prefix + ".")) and (
            best < 0 or len(prefix) > len(LAYERS[best])
        ):
            best = index
    assert best >= 0, module
    return best


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_imports_flow_down_the_layers_only() -> None:
    """A module imports its own layer and the ones below: the kernel nothing of the
    project, ``budget`` no ``llm``, ``llm`` no ``scheduler``, nothing but ``bot`` the bot."""
    modules = product_files()
    wrong = {
        f"{edge.importer} -> {edge.imported}"
        for name, path in modules.items()
        for edge in _imports(name, path, modules)
        if layer_of(edge.imported) > layer_of(edge.importer)
    }
    assert wrong <= UPWARD_LEFT, sorted(wrong - UPWARD_LEFT)
    assert wrong >= UPWARD_LEFT, "an upward import listed as left is gone: drop it"


def test_there_is_no_import_cycle() -> None:
    """Every import counts (module level, in a function, under ``TYPE_CHECKING``)."""
    left = set(cycles(import_graph()))
    assert left <= set(CYCLES_LEFT), sorted(sorted(c) for c in left - set(CYCLES_LEFT))
    assert set(CYCLES_LEFT) <= left, "a cycle listed as left is gone: drop it from the list"


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a two-module and a three-module cycle are found."""
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert set(cycles(graph)) == {frozenset({"a", "b"}), frozenset({"c", "d", "e"})}


def test_budget_llm_and_scheduler_never_import_aiogram() -> None:
    modules = product_files()
    wrong = []
    for name, path in modules.items():
        if layer_of(name) > LAYERS.index("scheduler"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            wrong += [f"{name}:{node.lineno}" for n in names if n.split(".")[0] == "aiogram"]
    assert wrong == []


def _function_lengths() -> Iterator[tuple[str, int]]:
    for name, path in product_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                yield f"{name}:{node.name}", node.end_lineno - node.lineno + 1


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in product_files().items()
    }
    over = {name for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert over <= OVERSIZED_MODULES, {n: sizes[n] for n in sorted(over - OVERSIZED_MODULES)}
    assert over >= OVERSIZED_MODULES, "folded below the limit: drop it from the list"


def test_no_function_is_over_the_size_limit() -> None:
    lengths = dict(_function_lengths())
    over = {name for name, lines in lengths.items() if lines > MAX_FUNCTION_LINES}
    assert over <= OVERLONG_FUNCTIONS, {n: lengths[n] for n in sorted(over - OVERLONG_FUNCTIONS)}
    assert over >= OVERLONG_FUNCTIONS, "folded below the limit: drop it from the list"


def citations(text: str) -> list[tuple[int, str]]:
    """Every review round ``text`` cites, as (line number from 1, the citation), in order.
    Matched across line breaks (a "trial" ending a line and its number starting the next
    are one citation); a "§" after a standard's name on its line (:data:`STANDARD`) is
    that standard's section."""
    found = []
    for match in CITATION.finditer(text):
        start = text.rfind("\n", 0, match.start()) + 1
        if match.group().startswith("§") and STANDARD.search(text, start, match.start()):
            continue
        found.append((text.count("\n", 0, match.start()) + 1, match.group()))
    return found


def citing_files() -> dict[str, list[tuple[int, str]]]:
    """Relative path → its citations, for each text file in the scope that cites one."""
    paths = [ROOT / name for name in CITATION_FILES]
    for folder in CITATION_SCOPE:
        paths += (p for p in (ROOT / folder).rglob("*") if p.is_file())
    cited = {}
    for path in paths:
        rel = path.relative_to(ROOT)
        if (
            rel.parts[:2] == ("docs", "decisions")
            or (rel.parts[:2] == ("tests", "fixtures") and path.suffix != ".py")
            or path.suffix not in CITATION_SUFFIXES
            or "__pycache__" in rel.parts
            or not path.exists()
        ):
            continue
        found = citations(path.read_text(encoding="utf-8", errors="replace"))
        if found:
            cited[rel.as_posix()] = found
    return cited


def test_no_code_test_or_document_cites_a_review_round() -> None:
    """Comments, docstrings and strings explain; "issue N" or "trial N, FN" tells a
    newcomer nothing (the decision goes to ``docs/decisions/NNN-*.md``)."""
    cited = citing_files()
    wrong = [
        f"{path}:{line}: {citation}"
        for path, found in sorted(cited.items())
        if path not in HISTORY_LEFT | HISTORY_ELSEWHERE
        for line, citation in found
    ]
    assert wrong == []
    assert set(cited) >= HISTORY_LEFT, "a file listed as citing no longer does: drop it"


def test_the_citation_scanner_catches_a_planted_round() -> None:
    """The scanner finds each shape a round was cited in (built from numbers here, so
    this file's own text cites nothing) and leaves standards, lint codes and PDF names."""
    planted = [
        f'"""Issue {16} §{5}: t.me posts with impossible dates are skipped."""',
        f"    booked for good (trial {12}, F{13}, ~20x the call).",
        f"# trial {13}, F{7}: a raw @ in the password",
        f"Targets (issue {12}): hold p50 ≤ 2 ms",
        f"stopped by a signal (trial\n{12}, F{1}): SIGTERM",
        f"Trial of issue {9} §{2} with new inputs",
        f"Finding {5} of trial {15}",
        f"noticed by the trial-{12}b fixes",
        f"def test_issue_{16}_bombs() -> None:",
        f"after review round {2}",
        f"see §{3} of issue {16}",
    ]
    for sample in planted:
        assert citations(sample), sample
    assert [line for line, _ in citations(planted[4])] == [1, 2]
    clean = [
        "import matplotlib  # noqa: F401",
        "an HTTP date (RFC 9110 §10.2.3); ISO/IEC 15948 §11.2.2",
        'res = b"<< /Font << /F1 5 0 R >> >>"; color = "#F12"',
        "the half-open trial is held; trials=[]; pypdf's issue-297 sample",
        "does not cite a review round",
    ]
    assert [sample for sample in clean if citations(sample)] == []


def test_tests_are_named_by_behaviour() -> None:
    """No test file or test function is named after a review round."""
    round_name = re.compile(r"(issue|trial)_?\d+", re.IGNORECASE)
    wrong = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if round_name.search(path.name):
            wrong.append(str(path.relative_to(ROOT)))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and round_name.search(
                node.name
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert wrong == []


def test_only_the_composition_root_imports_handlers() -> None:
    """Routers sit at the top of the bot: ``bot.app`` (the composition root) and the
    handlers themselves import them; the middlewares' typed context, the chat service,
    storage and ops never do (what a handler builds for the dispatcher is named there by
    a protocol), so nothing below the handlers can close a circle through them."""
    wrong = sorted(
        f"{importer} -> {imported}"
        for importer, imports in import_graph().items()
        for imported in imports
        if imported.startswith("bot.handlers")
        and not importer.startswith(("bot.handlers", "bot.app"))
    )
    assert wrong == []
