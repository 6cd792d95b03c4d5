"""The import graph as a user's install depends on it: `pip install lessor` is the CLI alone,
so the CLI may import only what that install brings (an allow-list, read from setup.cfg, so a
new import fails here instead of at a user's first `lessor` command); and no package of lessor
imports, through others, a package that imports it (a cycle is two packages that are one).

Read with `ast` from the sources, not by importing them: lazy imports inside functions count
too, and nothing of the server stack needs to be installed for the check.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lessor"

# What `lessor` may import of itself: the version (lessor/__init__.py), its own modules and the
# wire formats. `lessor apiserver` and `lessor operator` reach the server by a string handed to
# importlib (lessor/cli/main.py), deliberately: they say how to install it when it is missing.
CLI_LESSOR = ("lessor", "lessor.cli", "lessor.protocol")
HANDOFFS = {"lessor.apiserver.server", "lessor.operator.main"}
HANDLER = re.compile(r"(lessor(?:\.\w+)+):\w+")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imported(module: str, path: Path, *, handlers: bool = True) -> set[str]:
    """Every dotted name the module imports, at any depth of its code; with `handlers`, also
    each `"module:function"` it names for importlib to import when chosen."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                names.add(candidate if candidate in MODULES else base)
        elif handlers and isinstance(node, ast.Constant) and isinstance(node.value, str):
            # "lessor.cli.commands.lease:run": a handler imported by importlib when chosen
            reference = HANDLER.fullmatch(node.value)
            if reference and reference[1] in MODULES:
                names.add(reference[1])
    return names


def _lessor_module(name: str) -> str | None:
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) or None


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _cli_distributions() -> set[str]:
    """The import names of the distributions `pip install lessor` brings: install_requires and
    what they require in turn, as installed here."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    wanted = [
        re.split(r"[\s<>=!\[;]", line.strip(), maxsplit=1)[0]
        for line in config["options"]["install_requires"].splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    seen: set[str] = set()
    while wanted:
        name = wanted.pop().lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        for requirement in importlib.metadata.requires(name) or []:
            if "extra ==" not in requirement:
                wanted.append(re.split(r"[\s<>=!\[;(~]", requirement, maxsplit=1)[0])
    top_levels = importlib.metadata.packages_distributions()
    return {
        top
        for top, distributions in top_levels.items()
        if any(d.lower().replace("_", "-") in seen for d in distributions)
    }


def _within(module: str, allowed: tuple[str, ...]) -> bool:
    """`lessor` itself (the version), or a module of one of the allowed packages."""
    return module == "lessor" or any(module.startswith(p + ".") or module == p for p in allowed[1:])


def _reached_from(entry: str) -> set[str]:
    """The lessor modules a run of `entry` may import, lazily or not."""
    reached, frontier = set(), [entry]
    while frontier:
        module = frontier.pop()
        if module in reached:
            continue
        reached.add(module)
        for name in _imported(module, MODULES[module]):
            target = _lessor_module(name) if name.startswith("lessor") else None
            if target in HANDOFFS:
                continue  # not followed: the server's own install is asked for there
            frontier.extend(t for t in (target, *_parents(target)) if t and t in MODULES)
    return reached


def _parents(module: str | None) -> list[str]:
    """Importing `a.b.c` runs `a/__init__` and `a/b/__init__` first."""
    parts = (module or "").split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_the_lessor_command_imports_only_what_its_own_install_brings() -> None:
    """From the entry point of setup.cfg, every module it can reach. (lessor.cli.manpages is
    run at build time, with the test extra; the command never imports it.)"""
    allowed_external = _cli_distributions() | set(sys.stdlib_module_names) | {"__future__"}
    assert {"pydantic", "yaml", "wsproto", "jsonpath_ng", "argcomplete"} <= allowed_external
    reached = _reached_from("lessor.cli.main")
    assert "lessor.cli.commands.lease" in reached
    outside = []
    for module in sorted(reached):
        if not _within(module, CLI_LESSOR):
            outside.append(f"the command reaches {module}")
            continue
        for name in _imported(module, MODULES[module]):
            if name.split(".")[0] not in {"lessor", *allowed_external}:
                outside.append(f"{module} imports {name}")
    assert outside == []


def test_the_allow_list_refuses_what_the_server_install_adds() -> None:
    """The check above can fail: what only `lessor[server]` brings is not in the list."""
    allowed = _cli_distributions()
    assert not {"boto3", "aiohttp", "httpx", "falcon", "kubernetes", "jwt"} & allowed


def _package_cycles() -> list[list[str]]:
    # Imports only: a handler the CLI's parser names by string is its table of contents (as
    # ROUTES is the API server's), imported when its command runs, and the commands build on
    # the CLI's own modules beside the parser.
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in MODULES.items():
        for name in _imported(module, path, handlers=False):
            target = _lessor_module(name) if name.startswith("lessor") else None
            if target and _package(target) != _package(module):
                graph[_package(module)].add(_package(target))
    return _strongly_connected(graph)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    nodes = sorted({*graph, *(w for targets in graph.values() for w in targets)})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_package_of_lessor_imports_one_that_imports_it() -> None:
    assert _package_cycles() == []


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}}, []),
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [["a", "b", "c"]]),
    ],
)
def test_cycles_are_found(graph: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert _strongly_connected(graph) == cycles
