"""The layout's rules, read from the source: imports point only down the layers, no modules import each
other round a circle (lazy imports inside functions count), every module opens with a docstring saying what
it is, and no source file grows past 500 lines (ARCHITECTURE.md explains the layers)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "train", "export")
MAX_LINES = 500

# A module may import modules of its own group and of lower layers; nothing else but ALLOWED_PEERS.
LAYERS = {
    "engine": 0,  # the package itself and BASE: used by every layer
    "engine.core": 1,  # the game and the network
    "engine.records": 2,  # record formats and writers
    "engine.usi_spec": 2,  # an engine's command line and search limits (no cshogi: for the tools' flags)
    "engine.search": 3,
    "engine.backends": 3,
    "engine.usi_client": 3,  # driving another USI engine
    "engine.play": 4,  # our USI engine
    "engine.selfplay": 4,
    "engine.match": 4,
    "engine.analysis": 4,  # bin/analyze: games analysed by our engine over USI
    "export": 5,  # ONNX, TensorRT
    "train": 5,  # the package itself only
    "train.data": 5,  # records read in bulk, conversion, the dataset
    "train.trainer": 6,
    "train.teachers": 6,  # corpora, rescoring, distillation: they make data, they never train
    "train.loop": 7,  # self-play -> train -> export -> evaluate
}
BASE = {"engine.console", "engine.errors", "engine.fileio", "engine.paths"}
ALLOWED_PEERS = {
    ("engine.search", "engine.backends.evaluator"),  # search sees a network only through Evaluator
}


def module_files(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted name -> file, for every module of the packages under `root`."""
    files = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


MODULES = module_files()


def group(module: str) -> str | None:
    """The LAYERS key of a module: itself or its longest listed package (`engine`: itself and BASE)."""
    if module in BASE:
        return "engine"
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LAYERS and (key not in ("engine", "train") or module == key):
            return key
    return None


def imported(module: str, path: Path, modules: dict[str, Path] = MODULES) -> list[tuple[int, str]]:
    """(line, module) for each import of the packages of `modules`, at any depth (lazy imports count too).
    `from engine.records import formats` names the submodule engine.records.formats."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    packages = {name.split(".")[0] for name in modules}
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if sub in modules else base))
    return sorted({(line, name) for line, name in found if name.split(".")[0] in packages})


def allowed(source: str, target: str) -> bool:
    here, there = group(source), group(target)
    if here == there or LAYERS[there] < LAYERS[here]:
        return True
    return any(here == a and (target == b or target.startswith(b + ".")) for a, b in ALLOWED_PEERS)


def import_graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """module -> {module it imports: the line of the first such import}, between the given modules."""
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for line, target in imported(module, path, modules):
            if target in modules and target != module:
                edges.setdefault(target, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The modules of each import circle (a strongly connected set of two or more), found by Tarjan's
    algorithm; each list sorted, the lists in order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            circle = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                circle.append(w)
                if w == v:
                    break
            if len(circle) > 1:
                found.append(sorted(circle))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def describe_cycle(
    circle: list[str], graph: dict[str, dict[str, int]], modules: dict[str, Path], root: Path = REPO
) -> str:
    """One line per import that stays inside the circle: `FILE:LINE: A imports B`."""
    return "\n".join(
        f"  {modules[a].relative_to(root)}:{graph[a][b]}: {a} imports {b}"
        for a in circle
        for b in sorted(graph[a])
        if b in circle
    )


def test_every_module_has_a_layer():
    assert len(MODULES) > 30, "the test must see the packages' modules"
    assert [m for m in MODULES if group(m) is None] == [], "place these modules in a layer (LAYERS)"


def test_no_module_imports_a_higher_layer():
    wrong = []
    for module, path in MODULES.items():
        if group(module) is None:
            continue
        for line, target in imported(module, path):
            if group(target) is None:
                wrong.append(f"{path.relative_to(REPO)}:{line}: {target} is no module in a layer")
            elif not allowed(module, target):
                here, there = group(module), group(target)
                wrong.append(
                    f"{path.relative_to(REPO)}:{line}: {here} (layer {LAYERS[here]}) imports "
                    f"{target} (layer {LAYERS[there]})"
                )
    assert wrong == [], "\n".join(wrong)


def test_no_import_cycles():
    """Imports between our modules run one way: a circle means two modules are one concept split badly
    (or a choice made at the wrong level). Put what both need below them, or the choice above them."""
    graph = import_graph(MODULES)
    circles = import_cycles(graph)
    report = "\n".join(f"import circle {c}:\n{describe_cycle(c, graph, MODULES)}" for c in circles)
    assert circles == [], report


def test_a_planted_cycle_is_found(tmp_path):
    """The check above fails on a circle closed by a lazy import inside a function, and names its lines."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    sources = {
        "__init__.py": '"""A package."""\n',
        "sub/__init__.py": '"""A subpackage."""\n',
        "interface.py": '"""The interface."""\n\n\ndef make():\n    from pkg.sub import impl\n',
        "sub/impl.py": '"""An implementation."""\n\nfrom pkg.interface import make\n',
        "user.py": '"""A user of both."""\n\nfrom pkg import interface\nfrom pkg.sub import impl\n',
    }
    for name, source in sources.items():
        (package / name).write_text(source)
    modules = module_files(tmp_path, ("pkg",))
    graph = import_graph(modules)
    assert graph["pkg.user"] == {"pkg.interface": 3, "pkg.sub.impl": 4}
    circles = import_cycles(graph)
    assert circles == [["pkg.interface", "pkg.sub.impl"]]
    assert describe_cycle(circles[0], graph, modules, tmp_path).splitlines() == [
        "  pkg/interface.py:5: pkg.interface imports pkg.sub.impl",
        "  pkg/sub/impl.py:3: pkg.sub.impl imports pkg.interface",
    ]
    (package / "interface.py").write_text('"""The interface, importing nothing."""\n')
    assert import_cycles(import_graph(module_files(tmp_path, ("pkg",)))) == []


def test_every_module_opens_with_a_docstring():
    missing = [m for m, path in MODULES.items() if not ast.get_docstring(ast.parse(path.read_text()))]
    assert missing == [], f"modules without a docstring: {missing}"


def test_no_source_file_is_over_the_limit():
    sources = [*MODULES.values(), *(REPO / "bench").glob("*.py")]
    sources += [p for p in (REPO / "bin").iterdir() if p.is_file() and p.read_text().startswith("#!")]
    lines = {str(path.relative_to(REPO)): len(path.read_text().splitlines()) for path in sources}
    long = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert long == {}, f"files over {MAX_LINES} lines (split them where a second concept lives): {long}"


def test_train_subpackages_are_layered():
    """The concerns of train/ stay apart: teachers make data and never train, the loop sits on top."""
    assert allowed("train.trainer.run", "train.data.dataset")
    assert allowed("train.teachers.corpus", "train.data.convert")
    assert allowed("train.loop.steps", "train.trainer.run")
    assert allowed("train.loop.steps", "export.onnx_export")
    assert not allowed("train.teachers.corpus", "train.trainer.run")
    assert not allowed("train.trainer.run", "train.teachers.corpus")
    assert not allowed("train.data.dataset", "train.trainer.config")
    assert not allowed("train.data.dataset", "export.onnx_export")
