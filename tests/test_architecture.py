"""The shape of the package: imports go down the layer table (docs/architecture.md), the public
surface is what __all__ says, and names and defaults match torch.distributed's."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import accord

PACKAGE = pathlib.Path(accord.__file__).parent
LAYERS = [("errors", "timeouts", "config", "auth", "tls", "reduce_ops", "arrays", "profiling"), ("store",), ("rendezvous",),
          ("transport",), ("collectives",), ("group",), ("engines", "devices"),
          ("api", "world", "backend_names", "diagnostics"), ("integrations",), ("launcher", "bench")]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# siblings may not import each other: transport and collectives (an algorithm never sees a
# socket), the other engines and the device routing
SIBLINGS = {("collectives", "transport"), ("transport", "collectives"), ("engines", "devices"),
            ("devices", "engines")}


def _layer(parts: list[str]) -> str | None:
    return parts[0] if parts and parts[0] in RANK else None


def _imports(path: pathlib.Path) -> list[tuple[int, list[str]]]:
    rel = path.relative_to(PACKAGE).with_suffix("").parts
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel[: len(rel) - node.level])
                target = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("accord"):
                target = node.module.split(".")[1:]
            else:
                continue
            if not target or target == [""]:
                target = [alias.name for alias in node.names][:1]
            found.append((node.lineno, target))
    return found


def test_imports_go_down_the_layer_table():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        rel = list(path.relative_to(PACKAGE).with_suffix("").parts)
        mine = _layer(rel)
        if mine is None:
            continue
        for line, target in _imports(path):
            theirs = _layer(target)
            if theirs is None or theirs == mine:
                continue
            if RANK[theirs] > RANK[mine] or (mine, theirs) in SIBLINGS:
                upward.append(f"{'/'.join(rel)}.py:{line} imports {'.'.join(target)}")
    assert not upward, "imports that go up the layer table:\n" + "\n".join(upward)


def _module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (type-checking imports included: a circle
    drawn only for the type checker still ties the modules together)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("").parts
        modules[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            rel = path.relative_to(PACKAGE).with_suffix("").parts
            if node.level:
                target = list(rel[: len(rel) - node.level]) + (node.module.split(".") if node.module else [])
            elif node.module and node.module.startswith("accord"):
                target = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # "from . import x" names a module; "from .x import y" does not
                whole = ".".join(target + [alias.name])
                deps.add(whole if whole in modules else ".".join(target))
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def test_no_import_circles_between_modules():
    """No module imports (even only for type checking) a module that imports it back, directly
    or through others. Packages' __init__ files, which re-export their modules, are left out."""
    packages = {p.parent.relative_to(PACKAGE).as_posix().replace("/", ".").strip(".")
                for p in PACKAGE.rglob("__init__.py")}
    graph = {m: deps - packages for m, deps in _module_graph().items() if m not in packages}
    circles = set()
    for start in graph:
        seen, stack = set(), [[start]]
        while stack:
            path = stack.pop()
            for dep in graph.get(path[-1], ()):
                if dep == start:
                    circles.add(" -> ".join(path + [dep]))
                elif dep not in seen:
                    seen.add(dep)
                    stack.append(path + [dep])
    assert not circles, "import circles:\n" + "\n".join(sorted(circles))


#: Private names one accord module may use although another defines them, each with its
#: reason. Everything else a module needs of another goes through a public name: a private
#: one is free to change without reading the modules beyond its own.
PRIVATE_REACHES_ALLOWED = {
    # torch's own names, which accord's modules mirror or call on torch's objects
    "_plugins": "torch's Backend._plugins registry (accord.Backend keeps the same attribute)",
    "_make_nccl_premul_sum": "torch.distributed's own function (accord exports its twin)",
    "_allgather_base": "a method of torch's ProcessGroup, called on torch's NCCL group",
    "_reduce_scatter_base": "a method of torch's ProcessGroup, called on torch's NCCL group",
    "_source_rank": "a method of torch's Work (the sender of an any-source receive)",
}


def _private_definitions() -> tuple[dict[str, set[str]], dict[str, ast.Module]]:
    """name -> the modules that define it (a function, class, assignment or slot), and
    every module's tree."""
    defined: dict[str, set[str]] = {}
    trees = {}
    for path in PACKAGE.rglob("*.py"):
        module = str(path.relative_to(PACKAGE))
        tree = trees[module] = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names = [node.attr]
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names = [node.id]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names = [node.target.id]
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                      for t in node.targets):
                names = [e.value for e in ast.walk(node.value)
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            for name in names:
                if name.startswith("_") and not name.startswith("__"):
                    defined.setdefault(name, set()).add(module)
    return defined, trees


def test_no_module_reaches_into_another_modules_private_names():
    """``x._name`` (x not self/cls) or ``from m import _name``, where ``_name`` is defined
    only in other accord modules, is allowed only for the names listed with their reason."""
    defined, trees = _private_definitions()
    reaches = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            used: list[str] = []
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                used = [node.attr]
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("accord")):
                used = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            for name in used:
                owners = defined.get(name)
                if owners and module not in owners and name not in PRIVATE_REACHES_ALLOWED:
                    reaches.append(f"{module}:{node.lineno} uses {name} (defined in {', '.join(sorted(owners))})")
    assert not reaches, "private names used across modules:\n" + "\n".join(sorted(reaches))


def test_every_module_says_what_it_owns():
    missing = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__main__.py" and not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert not missing, f"modules without a docstring: {missing}"


def test_all_names_exist():
    assert sorted(set(accord.__all__)) == sorted(accord.__all__)
    for name in accord.__all__:
        assert hasattr(accord, name), name



def _torch():
    try:
        import torch.distributed as dist
    except ImportError:
        pytest.skip("torch is not installed")
    return dist


def _functions() -> list[str]:
    return [n for n in accord.__all__ if inspect.isfunction(getattr(accord, n)) and not n.startswith("_")]


@pytest.mark.parametrize("name", _functions())
def test_signatures_match_torch(name):
    tdist = _torch()
    theirs_fn = getattr(tdist, name, None)
    if theirs_fn is None or not callable(theirs_fn):
        pytest.skip(f"torch.distributed has no {name}")
    try:
        theirs = inspect.signature(theirs_fn)
    except (TypeError, ValueError):
        pytest.skip(f"torch's {name} has no Python signature")
    ours = inspect.signature(getattr(accord, name))
    for param in theirs.parameters.values():
        if param.name.startswith("_") or param.name == "device_id":
            continue
        assert param.name in ours.parameters, f"{name} lacks torch's parameter {param.name!r}"
        mine = ours.parameters[param.name]
        if param.default is not inspect.Parameter.empty and not callable(param.default):
            if isinstance(param.default, (int, float, str, bool, type(None))):
                assert mine.default == param.default, f"{name}({param.name}=) default differs"
    names = [p for p in theirs.parameters if not p.startswith("_")]
    mine_order = [p for p in ours.parameters if p in names]
    assert mine_order == [p for p in names if p in ours.parameters], f"{name}: parameter order differs"
