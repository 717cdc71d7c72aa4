"""The house is acyclic: the imports drawn from the source (deferred ones included) have no circle, between
modules or between folders, and the generic rooms name no task and no attention kind's option."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tra_attn"
PACKAGE = "tra_attn"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in SRC.rglob("*.py")}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (annotations, never run)."""
    skipped = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
            skipped |= {id(n) for sub in node.body for n in ast.walk(sub)}
    return skipped


def imports_of(name: str) -> set[str]:
    """The package's modules that importing ``name`` runs: its imports (also those inside functions) and the
    packages around them whose ``__init__`` runs first (except the root package and ``name``'s own)."""
    tree = ast.parse(MODULES[name].read_text())
    skipped = _type_checking_only(tree)
    here = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            base = here.split(".")[: len(here.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            targets |= {t for t in [target, *(f"{target}.{a.name}" for a in node.names)] if t in MODULES}
        elif isinstance(node, ast.Import):
            targets |= {a.name for a in node.names if a.name in MODULES}
    found = set()
    for target in targets:
        parts = target.split(".")
        for i in range(2, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if i == len(parts) or not name.startswith(prefix + "."):
                found.add(prefix)
    return found - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def folder(name: str) -> str:
    return name.split(".")[1] if "." in name else name


def test_no_module_imports_itself_through_others():
    assert cycles(GRAPH) == []


def test_the_folders_are_layered_without_a_circle():
    folders: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        if name != PACKAGE:
            folders.setdefault(folder(name), set()).update(folder(t) for t in targets if t != PACKAGE)
    for name, targets in folders.items():
        targets.discard(name)
    assert cycles(folders) == []


def test_the_checker_sees_a_deferred_import_circle(tmp_path):
    """The check can fail: two modules importing each other, one of them inside a function, are a circle."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


EXPERIMENTS = f"{PACKAGE}.experiments"
SHARED_PAGES = f"{EXPERIMENTS}.pages"


def experiment_package(name: str) -> str | None:
    """The experiment package ``name`` lies in (``tra_attn.experiments.passkey``), or None: outside the experiments,
    in a module shared by all of them, or in the pages they share."""
    parts = name.split(".")
    package = ".".join(parts[:3])
    if len(parts) < 3 or package == SHARED_PAGES or not name.startswith(EXPERIMENTS + "."):
        return None
    return package if MODULES[package].name == "__init__.py" else None


def crossings(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every module of one experiment package that imports a module of another."""
    found = []
    for name, targets in sorted(graph.items()):
        own = experiment_package(name)
        found += [f"{name} -> {t}" for t in sorted(targets) if own and experiment_package(t) not in (None, own)]
    return found


def test_no_experiment_package_imports_another():
    """Experiment packages hold their data and presets; what their pages share lives in ``experiments/pages``."""
    assert crossings(GRAPH) == []


def test_the_crossing_check_can_fail():
    graph = {f"{EXPERIMENTS}.ruler.report": {f"{EXPERIMENTS}.passkey.report", SHARED_PAGES + ".grid"}}
    assert crossings(graph) == [f"{EXPERIMENTS}.ruler.report -> {EXPERIMENTS}.passkey.report"]


# Rooms below the experiments that every task and attention kind passes through: none of them may name a
# task or a kind's option (a TRA-specific step in the training loop, a flip-flop branch in evaluation...).
GENERIC_ROOMS = ["training", "metrics", "utils", "data/task.py", "models", "hf", "cli/train.py"]
GENERIC_ROOMS += ["experiments/engine.py", "experiments/store.py", "experiments/identity.py", "experiments/spec.py"]
GENERIC_ROOMS += ["experiments/run.py", "experiments/pages", "experiments/preset.py", "experiments/scorecard.py"]
NAMED = re.compile(
    r"\btra_(?!attn\b)\w+|\brope_base\b|\bcope_max_pos\b|\bflipflop\b|\bmqar\b|\bselective_copy\b|\bpasskey\b"
)


def migration_lines(source: str) -> set[int]:
    """Line numbers of migration code (functions and tables named for migrating or legacy files, or for an old
    version's defaults): reading an old file may name the field it moves elsewhere."""
    migrating = re.compile(r"migrat|legacy|^V\d+_DEFAULTS$", re.IGNORECASE)

    def names(node) -> list[str]:
        if isinstance(node, ast.FunctionDef):
            return [node.name]
        targets = node.targets if isinstance(node, ast.Assign) else []
        return [t.id for t in targets if isinstance(t, ast.Name)]

    return {
        line
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.Assign)) and any(migrating.search(n) for n in names(node))
        for line in range(node.lineno, node.end_lineno + 1)
    }


def test_generic_rooms_name_no_task_and_no_attention_option():
    paths = [SRC / room for room in GENERIC_ROOMS if room.endswith(".py")]
    paths += [p for room in GENERIC_ROOMS if not room.endswith(".py") for p in (SRC / room).rglob("*.py")]
    offending = []
    for path in paths:
        source = path.read_text()
        exempt = migration_lines(source)
        offending += [
            f"{path.relative_to(SRC)}:{number}: {line.strip()}"
            for number, line in enumerate(source.splitlines(), 1)
            if NAMED.search(line) and number not in exempt
        ]
    assert offending == []
