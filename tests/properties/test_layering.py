"""The import rules of the code base, read from the source with `ast` (nothing is imported).

Every `import` counts, at the top of a module or inside a function: a lazy import still ties
the two modules together. Rules are checked over the transitive closure of bert_jax imports,
so a model file cannot reach TensorFlow through a helper either.
"""

from __future__ import annotations

import ast
import os

import pytest

from helpers import REPO, source

ROOT = os.path.join(REPO, "bert_jax")


def _module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-len(".py")].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def _sources() -> dict[str, str]:
    found = {}
    for dirpath, _, filenames in os.walk(ROOT):
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                found[_module_name(path)] = path
    return found


SOURCES = _sources()


def _imports(module: str) -> set[str]:
    """Every module named by an import statement anywhere in `module` (bert_jax names resolved
    to the module they import: `from bert_jax.train import checkpoint` ->
    `bert_jax.train.checkpoint`)."""
    tree = source.parse(SOURCES[module])
    package = module if SOURCES[module].endswith("__init__.py") else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.add(sub if sub in SOURCES else base)
    return names - {"__future__"}


IMPORTS = {module: _imports(module) for module in SOURCES}


def _internal(module: str) -> set[str]:
    return {name for name in IMPORTS[module] if name in SOURCES and name != module}


def _closure(module: str) -> set[str]:
    """`module` and every bert_jax module it reaches through imports."""
    seen, todo = {module}, [module]
    while todo:
        for name in _internal(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def _reaches(module: str, forbidden: tuple[str, ...]) -> list[str]:
    """'importer -> name' for each import in `module`'s closure that starts with a forbidden
    prefix (a package prefix matches its submodules)."""
    hits = []
    for importer in sorted(_closure(module)):
        for name in sorted(IMPORTS[importer]):
            if any(name == p or name.startswith(p + ".") for p in forbidden):
                hits.append(f"{importer} -> {name}")
    return hits


# The floors of the package, bottom up. A package may import the package-wide modules
# (`errors`, `flags`), itself and the packages named for it here, nothing else of bert_jax:
# an import from a lower floor to a higher one (or between the two jobs) fails
# `test_each_package_imports_only_the_floors_below_it`.
PACKAGE_WIDE = {"bert_jax", "bert_jax.errors", "bert_jax.flags"}
BELOW = {
    "host": set(),                                       # files, workdirs, process set-up
    "tokenization": {"host"},
    "data": {"host", "tokenization"},                    # text -> records -> batches
    "models": set(),                                     # the network: pure Flax
    "train": {"host", "tokenization", "data", "models"},  # the skeleton every job runs
    "weights": {"host", "tokenization", "models", "train"},  # models on disk and by name
    "serve": {"host", "tokenization", "data", "models", "train", "weights"},
    "pretrain": {"host", "tokenization", "data", "models", "train", "weights"},
    "finetune": {"host", "tokenization", "data", "models", "train", "weights", "serve"},
    "aot": {"host", "tokenization", "data", "models", "train", "weights", "pretrain"},
}
# The package-wide modules import no package; the front ends (the CLI's command table, the
# demo) may import anything.
FRONT_ENDS = {"bert_jax.cli", "bert_jax.demo"}
# Host-side packages: no JAX, no model.
NO_JAX = ("jax", "flax", "optax", "orbax")


def _package(module: str) -> str:
    """'host' for bert_jax.host.paths; the module itself for a package-wide one."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or parts[-1] in BELOW else module


def _package_violations(imports: dict[str, set[str]]) -> list[str]:
    """'importer -> imported' for each bert_jax import that the floors above forbid."""
    found = []
    for module, names in sorted(imports.items()):
        if module in FRONT_ENDS:
            continue
        home = _package(module)
        allowed = BELOW.get(home, set()) | {home}
        for name in sorted(n for n in names if n.startswith("bert_jax.") and n != module):
            if name in PACKAGE_WIDE and home not in PACKAGE_WIDE:
                continue
            if _package(name) not in allowed:
                found.append(f"{module} -> {name}")
    return found


def test_the_floors_name_every_package():
    packages = {_package(m) for m in SOURCES} - PACKAGE_WIDE - FRONT_ENDS
    assert packages == set(BELOW), "a new package needs its floor in BELOW"


def test_each_package_imports_only_the_floors_below_it():
    assert _package_violations(IMPORTS) == []


def test_an_upward_import_is_caught():
    """The rule can fail: a model directory reading a command's module, the network
    reaching for the partitioner, a package-wide module importing a package."""
    fake = {"bert_jax.weights.pretrained": {"bert_jax.finetune.cli"},
            "bert_jax.models.encoder": {"bert_jax.train.sharding"},
            "bert_jax.errors": {"bert_jax.host.paths"},
            "bert_jax.pretrain.job": {"bert_jax.finetune.job"}}
    assert len(_package_violations(fake)) == 4


@pytest.mark.parametrize("module", sorted(m for m in SOURCES if m.startswith("bert_jax.models")))
def test_the_network_imports_no_host_library(module):
    assert _reaches(module, ("tensorflow", "tensorflow_text", "optax", "orbax")) == []


@pytest.mark.parametrize("module", sorted(m for m in SOURCES if _package(m) in (
    "host", "data", "tokenization")))
def test_host_side_packages_import_no_jax(module):
    assert _reaches(module, NO_JAX) == []


# "Every part": each of these is one part; a module whose imports reach all of them is a
# front end, and only the CLI (through its command table) and the demo may be one.
PARTS = {
    "pretraining": ("bert_jax.pretrain",),
    "fine-tuning": ("bert_jax.finetune.job",),
    "conversion": ("bert_jax.weights.hf", "bert_jax.weights.tf1"),
    "data": ("bert_jax.data",),
    "tokenization": ("bert_jax.tokenization",),
}


def _parts_reached(modules: set[str]) -> set[str]:
    return {part for part, prefixes in PARTS.items()
            if any(m == p or m.startswith(p + ".") for m in modules for p in prefixes)}


def test_only_the_compat_module_imports_private_jax():
    """jax's private modules move between releases: `bert_jax.models.jax_compat` is the one
    place that names them, with the jax versions that need each."""
    private = {m for m in SOURCES if any(n == "jax._src" or n.startswith("jax._src.")
                                         for n in IMPORTS[m])}
    assert private == {"bert_jax.models.jax_compat"}


def test_the_reader_sees_function_level_imports():
    assert "bert_jax.finetune.selection" in IMPORTS["bert_jax.finetune.cli"]  # in a function
    assert "tensorflow" in IMPORTS["bert_jax.host.tf_host"]


def test_checkpoints_know_no_job_model_or_data():
    """Training checkpoints are the one layer every job saves and loads through: they know
    the checkpoint layout and nothing of the jobs, the network or the data."""
    assert _reaches("bert_jax.train.checkpoint", (
        "bert_jax.models.encoder", "bert_jax.models.heads", "bert_jax.data",
        "bert_jax.tokenization", "bert_jax.weights",
        "bert_jax.train.train_step", "bert_jax.train.metrics_writer")) == []


@pytest.mark.parametrize("module", ["bert_jax.train.train_loop", "bert_jax.train.train_step",
                                    "bert_jax.models.losses", "bert_jax.train.train_state"])
def test_the_training_core_imports_no_job_task_or_data(module):
    """The one loop serves pretraining, fine-tuning and distillation: it knows none."""
    assert _reaches(module, ("bert_jax.pretrain", "bert_jax.finetune", "bert_jax.aot",
                             "bert_jax.data", "bert_jax.train.checkpoint", "tensorflow")) == []


def test_the_job_skeleton_knows_no_job():
    """`lifecycle` is what every job runs its recipe in: it names no job or task."""
    assert _reaches("bert_jax.train.lifecycle", ("bert_jax.pretrain", "bert_jax.finetune",
                                                 "bert_jax.aot")) == []


def test_the_partitioner_imports_no_optimizer_or_train_state():
    """Inference and export place arrays through `bert_jax.train.sharding`; creating a
    TrainState (and optax with it) is `bert_jax.train.train_state`'s."""
    assert _reaches("bert_jax.train.sharding",
                    ("optax", "orbax", "bert_jax.train.train_state")) == []


@pytest.mark.parametrize("module", ["bert_jax.train.config_loader", "bert_jax.train.axis_rules"])
def test_loading_a_config_imports_no_jax(module):
    """The config files import `bert_jax.train.axis_rules`; `bert_jax.train.config_loader`
    loads them."""
    assert _reaches(module, ("jax", "flax", "optax", "orbax", "tensorflow")) == []


@pytest.mark.parametrize("module", ["bert_jax.host.backend_env", "bert_jax.aot.tpu_slices",
                                    "bert_jax.aot.gpu_hosts", "bert_jax.aot.collectives"])
def test_backend_set_up_and_topology_tables_import_no_jax(module):
    """The CLI and conftest.py set the plugins' environment before JAX may start."""
    assert _reaches(module, ("jax", "flax", "optax", "orbax", "tensorflow")) == []


def test_the_pretraining_job_parses_no_command_line():
    """`bert-jax pretrain`'s flags and exit codes live in bert_jax.pretrain.cli; pretrain.py
    is the job, callable from Python with a config."""
    assert IMPORTS["bert_jax.pretrain.job"] & {"argparse", "bert_jax.flags",
                                               "bert_jax.train.config_loader"} == set()


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(_internal(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(SOURCES):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    assert _cycles() == []


def test_only_the_cli_and_the_demo_import_every_part():
    front_ends = {m for m in SOURCES if _parts_reached(_closure(m)) == set(PARTS)}
    assert front_ends <= FRONT_ENDS, sorted(front_ends - FRONT_ENDS)


def test_the_cli_table_reaches_every_part():
    tree = source.parse(SOURCES["bert_jax.cli"])
    table = next(node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "COMMANDS" for t in node.targets))
    functions = [entry.elts[0].value.partition(":") for entry in table.values]
    commands = {module for module, _, _ in functions}
    assert commands <= set(SOURCES), sorted(commands - set(SOURCES))
    for module, _, function in functions:  # "module:function", a function of the module
        defined = {node.name for node in source.parse(SOURCES[module]).body
                   if isinstance(node, ast.FunctionDef)}
        assert function in defined, f"{module}:{function}"
    reached = set().union(*(_closure(m) for m in commands))
    assert _parts_reached(reached) == set(PARTS)


# Where flags are parsed and exit codes chosen: each package's cli.py (and the shared
# command line of the training commands, `bert_jax.train.job_cli`).
COMMAND_MODULES = {m for m in SOURCES if m.endswith(".cli")} | {"bert_jax.train.job_cli"}


def test_only_the_command_modules_parse_arguments():
    """Library modules parse no command line: the commands' functions in the cli modules
    call them with values."""
    parsing = {m for m in SOURCES if IMPORTS[m] & {"argparse", "bert_jax.flags"}}
    assert parsing - COMMAND_MODULES - FRONT_ENDS - {"bert_jax.flags"} == set()


def test_no_library_module_imports_a_command_module():
    """A job (the pretraining job converting raw text, say) imports the library, never
    a command's module."""
    importers = {m for m in set(SOURCES) - COMMAND_MODULES - FRONT_ENDS
                 if _internal(m) & COMMAND_MODULES}
    assert importers == set()


# Modules that read or write run paths (input files, workdirs, model directories, outputs):
# their file access goes through bert_jax.host.paths, so a gs:// path works wherever a local one
# does (docs/cloud.md).
RUN_PATH_MODULES = sorted(
    m for m in SOURCES if m.startswith(("bert_jax.finetune.", "bert_jax.tokenization"))
    and m != "bert_jax.tokenization.cli"  # reads stdin, writes stdout
    or m in ("bert_jax.pretrain.job", "bert_jax.train.checkpoint", "bert_jax.weights.pretrained",
             "bert_jax.train.metrics_writer", "bert_jax.host.atomic", "bert_jax.serve.embed",
             "bert_jax.serve.export",
             "bert_jax.weights.cli", "bert_jax.weights.convert", "bert_jax.serve.cli",
             "bert_jax.data.cli", "bert_jax.data.pipeline", "bert_jax.data.corpus",
             "bert_jax.pretrain.inputs", "bert_jax.data.build_vocab",
             "bert_jax.data.create_pretraining_data", "bert_jax.data.tfrecord"))
OS_FILE_FUNCTIONS = {"makedirs", "mkdir", "remove", "unlink", "rename", "replace", "listdir",
                     "scandir", "stat", "rmdir", "walk"}


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id] + parts[::-1]) if isinstance(node, ast.Name) else ""


def _direct_file_access(module: str) -> list[str]:
    """'line N: what' for each use of open(), os.path, os file functions, glob, shutil or
    TensorFlow's gfile in `module`."""
    tree = source.parse(SOURCES[module])
    hits = []
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id if node.func.id == "open" else ""
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if (dotted.startswith("os.path") or dotted.split(".")[0] in ("glob", "shutil")
                    or (dotted.startswith("os.") and dotted[3:] in OS_FILE_FUNCTIONS)
                    or "gfile" in dotted.split(".")):
                name = dotted
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""])
            name = ", ".join(m for m in modules if m.split(".")[0] in ("glob", "shutil"))
        if name:
            hits.append(f"line {node.lineno}: {name}")
    return sorted(set(hits))


def test_the_run_path_check_sees_direct_file_access():
    assert _direct_file_access("bert_jax.host.paths")  # the layer itself uses them all
    assert "bert_jax.finetune.job" in RUN_PATH_MODULES


@pytest.mark.parametrize("module", RUN_PATH_MODULES)
def test_run_paths_go_through_the_path_layer(module):
    """No open(), os.path, glob, shutil or gfile outside bert_jax.host.paths: they would fail
    (or silently write locally) for a gs:// workdir."""
    assert _direct_file_access(module) == []
