"""What a `spec.script` program shows before it runs: the mistakes read from its source.

Each check walks the program's syntax trees (`ast`, nothing is imported or run) and answers
with the `file:line` of what it found; `warnings` words them, said by the CLI (`local`,
`submit`) and as the operator's Warning events. Apart from `launcher.core.script`, which
loads and carries the program's files, so that reading the files and judging the code
change apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from launcher.core import contract
from launcher.core.script import Program, all_files

TF_CONFIG = contract.ENV_TF_CONFIG


def _python_trees(program: Program) -> Iterator[tuple[str, ast.Module]]:
    """Each .py file of the program that parses, by relative path (`check_compiles` reports
    the ones that do not)."""
    for rel, text in all_files(program).items():
        if not rel.endswith(".py"):
            continue
        try:
            yield rel, ast.parse(text, rel)
        except (SyntaxError, ValueError):
            continue


def keras3_imports(program: Program) -> list[str]:
    """`file:line` of each standalone `import keras` / `from keras ...` in the program.

    Since TensorFlow 2.16 that is Keras 3, whose `fit` fails under MultiWorkerMirroredStrategy
    with several workers (keras-team/keras#20585: a PerReplica error deep in training);
    `tf.keras` is tf-keras where tflaunch picks it (`launcher.core.keras_choice`), and so is
    `import tf_keras as keras`.
    """
    return _imports_of(program, "keras")


def _imports_of(program: Program, module: str) -> list[str]:
    """`file:line` of each import of `module` or of a module under it."""
    found = []
    for rel, tree in _python_trees(program):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            if any(name == module or name.startswith(f"{module}.") for name in names):
                found.append(f"{rel}:{node.lineno}")
    return found


KERAS_3_ONLY = frozenset({"ops", "config", "random", "tree", "distribution"})
"""Modules Keras 3 has and tf-keras does not (`keras.ops.mean`, `tf.keras.config`)."""
KERAS_3_WEIGHTS = ".weights.h5"
"""The file name Keras 3 demands of `save_weights` and ModelCheckpoint(save_weights_only);
tf-keras reads such a file wrongly (TypeError: ... 'Dataset' and 'int', TF 2.21)."""


def keras3_markers(program: Program) -> list[str]:
    """`file:line what` of each sign that the program is written for Keras 3: a standalone
    `import keras`, a Keras-3-only module (`keras.ops`, `tf.keras.config`), a `.weights.h5`
    file name (TensorFlow's distribute/keras.ipynb names its checkpoints so)."""
    found = [f"{where} imports keras" for where in keras3_imports(program)]
    for rel, tree in _python_trees(program):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in KERAS_3_ONLY:
                dotted = _dotted(node) or ""
                if dotted.split(".")[-2:-1] == ["keras"]:
                    found.append(f"{rel}:{node.lineno} {dotted}")
            elif isinstance(node, ast.Constant) and str(node.value).endswith(KERAS_3_WEIGHTS):
                found.append(f"{rel}:{node.lineno} a {KERAS_3_WEIGHTS} file")
    return sorted(set(found), key=_by_place)


def _by_place(where: str) -> tuple[str, int]:
    rel, _, rest = where.partition(":")
    return rel, int(rest.split(" ", 1)[0])


def tf_keras_imports(program: Program) -> list[str]:
    """`file:line` of each `import tf_keras` (the program picks tf-keras itself)."""
    return _imports_of(program, "tf_keras")


def uses_multi_worker_strategy(program: Program) -> bool:
    """Whether some file of the program names a multi-worker strategy."""
    return one_machine_strategies(program) is None


def _is_environ(node: ast.expr) -> bool:
    """`os.environ` or a bare `environ` (`from os import environ`)."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _names_tf_config(node: ast.AST) -> bool:
    return any(
        isinstance(child, ast.Constant) and child.value == TF_CONFIG for child in ast.walk(node)
    )


def _sets_tf_config(node: ast.AST) -> bool:
    """`os.environ["TF_CONFIG"] = ...`, `os.environ.update(TF_CONFIG=...)` or
    `.update({"TF_CONFIG": ...})`, `os.putenv("TF_CONFIG", ...)`; not `setdefault`, which
    leaves tflaunch's value in place."""
    if isinstance(node, ast.Assign):
        return any(
            isinstance(target, ast.Subscript)
            and _is_environ(target.value)
            and _names_tf_config(target.slice)
            for target in node.targets
        )
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return False
    if node.func.attr == "update" and _is_environ(node.func.value):
        keys = [k for arg in node.args if isinstance(arg, ast.Dict) for k in arg.keys if k]
        return any(k.arg == TF_CONFIG for k in node.keywords) or any(map(_names_tf_config, keys))
    return node.func.attr == "putenv" and bool(node.args) and _names_tf_config(node.args[0])


def tf_config_assignments(program: Program) -> list[str]:
    """`file:line` of each place the program sets TF_CONFIG itself, unguarded.

    Code ported from TensorFlow's multi-worker tutorials often builds TF_CONFIG by hand
    (`os.environ["TF_CONFIG"] = json.dumps({... "index": 0})`). Under tflaunch that replaces
    the TF_CONFIG each worker was given, so every worker claims the same index. An assignment
    inside an `if` whose test names TF_CONFIG (`if "TF_CONFIG" not in os.environ:`) only fills
    in a missing one, and is not reported.
    """
    found: list[tuple[str, int]] = []
    for rel, tree in _python_trees(program):
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _names_tf_config(node.test):
                guarded.update(id(child) for child in ast.walk(node) if child is not node.test)
        for node in ast.walk(tree):
            if id(node) not in guarded and _sets_tf_config(node):
                found.append((rel, node.lineno))  # type: ignore[attr-defined]
    return [f"{rel}:{line}" for rel, line in sorted(set(found))]  # one per line, in order


MULTI_WORKER_STRATEGIES = frozenset({"MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy"})
"""The strategies that read TF_CONFIG and synchronize the workers."""
ONE_MACHINE_STRATEGIES = frozenset(
    {"MirroredStrategy", "OneDeviceStrategy", "CentralStorageStrategy"}
)
"""Strategies that span the devices of one machine only: under several workers each trains
its own copy of the model."""


def _called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _mentions_multi_worker_strategy(tree: ast.Module) -> bool:
    """Any use of a multi-worker strategy's name: `tf.distribute.MultiWorkerMirroredStrategy`,
    `from ... import MultiWorkerMirroredStrategy as MWMS`, or the name as a string
    (`getattr(tf.distribute, "MultiWorkerMirroredStrategy")`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, ast.alias):
            name = node.name.rsplit(".", 1)[-1]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(strategy in node.value for strategy in MULTI_WORKER_STRATEGIES):
                return True
            continue
        else:
            continue
        if name in MULTI_WORKER_STRATEGIES:
            return True
    return False


def one_machine_strategies(program: Program) -> list[str] | None:
    """What makes a program train each worker alone, when it runs on several: None when
    some file of it uses a multi-worker strategy (all is well), else the `file:line Name` of
    each one-machine strategy it creates (`tf.distribute.MirroredStrategy()`), [] for none.

    A program that creates MultiWorkerMirroredStrategy only inside a library it imports
    from outside the script looks like [] here: the caller's message says so.
    """
    trees = list(_python_trees(program))
    if any(_mentions_multi_worker_strategy(tree) for _, tree in trees):
        return None
    found: set[tuple[str, int, str]] = set()
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called_name(node) in ONE_MACHINE_STRATEGIES:
                found.add((rel, node.lineno, str(_called_name(node))))
    return [f"{rel}:{line} {name}" for rel, line, name in sorted(found)]


SCOPE_CALLS = frozenset({"scope", "experimental_set_strategy"})
"""What puts variables under a strategy: `with strategy.scope():`, or the strategy set for
the whole program (`tf.distribute.experimental_set_strategy`)."""


def never_enters_a_scope(program: Program) -> bool:
    """Whether the program creates a multi-worker strategy but no file of it ever calls
    `.scope()`: a Keras model built outside the scope is not mirrored, `fit` then trains it
    with the default strategy, and each worker trains its own copy, silently."""
    trees = [tree for _, tree in _python_trees(program)]
    if not any(_mentions_multi_worker_strategy(tree) for tree in trees):
        return False
    return not any(
        isinstance(node, ast.Call) and _called_name(node) in SCOPE_CALLS
        for tree in trees
        for node in ast.walk(tree)
    )


SAVE_CALLS = frozenset({"save", "save_weights", "save_model"})
"""`model.save`, `model.save_weights`, `tf.saved_model.save`, `tf.keras.models.save_model`
(and a `Checkpoint`'s `save`)."""
NOT_TENSORFLOW = frozenset({"np", "numpy", "pickle", "joblib", "torch", "plt", "json"})
"""Receivers whose `save` writes a file and runs nothing collective (`np.save`)."""
WORKER_INDEX_WORDS = ("index", "task_id", "rank", "worker_id")


def _chief_branch(test: ast.expr) -> bool | None:
    """Which branch of `if test:` only the chief runs: True the body (`if is_chief:`, `if
    task_id == 0:`, `if task_type == "chief":`), False the else (`if not is_chief:`, `if
    task_id != 0:`), None when the test is not about being the chief."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _chief_branch(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(_chief_branch(value) for value in test.values) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, op, right = test.left, test.ops[0], test.comparators[0]
        names = ast.unparse(left).lower()
        chief = isinstance(right, ast.Constant) and (
            right.value == "chief"
            or (right.value == 0 and any(word in names for word in WORKER_INDEX_WORDS))
        )
        if not chief:
            return None
        if isinstance(op, ast.Eq | ast.Is):
            return True
        return False if isinstance(op, ast.NotEq | ast.IsNot) else None
    if isinstance(test, ast.Name | ast.Attribute | ast.Call):
        return True if "chief" in ast.unparse(test).lower() else None
    return None


def _saves(nodes: list[ast.stmt]) -> Iterator[ast.Call]:
    for statement in nodes:
        for node in ast.walk(statement):
            if not isinstance(node, ast.Call) or _called_name(node) not in SAVE_CALLS:
                continue
            receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
            if isinstance(receiver, ast.Name) and receiver.id in NOT_TENSORFLOW:
                continue
            yield node


def chief_only_saves(program: Program) -> list[str]:
    """`file:line name` of each save only the chief makes (`if task_id == 0:
    model.save(...)`), in a program that uses MultiWorkerMirroredStrategy.

    Saving reads variables the workers keep in sync (a Keras model's metrics, sync-on-read
    variables) with collective operations, which every worker must join: the chief waits
    in them for peers that never come, and fails when they exit (measured with TensorFlow's
    own tutorial program: `UnavailableError ... Collective ops is aborted`, TF 2.21).
    """
    if one_machine_strategies(program) is not None:
        return []
    found: set[tuple[str, int, str]] = set()
    for rel, tree in _python_trees(program):
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            branch = _chief_branch(node.test)
            if branch is None:
                continue
            for call in _saves(node.body if branch else node.orelse):
                found.add((rel, call.lineno, str(_called_name(call))))
    return [f"{rel}:{line} {name}" for rel, line, name in sorted(found)]


def warnings(program: Program, workers: int) -> list[str]:
    """The mistakes the program shows before it runs, one sentence each, said by the CLI
    (`local`, `submit`) and as the operator's Warning events; the program still runs.

    Standalone keras (Keras 3, whose fit fails under MultiWorkerMirroredStrategy: said now,
    not as a PerReplica traceback), a TF_CONFIG the program sets itself, and, with several
    workers, no multi-worker strategy or no `strategy.scope()` (each worker would train its
    own copy, and the job still succeed) or a save only the chief makes (it would fail
    waiting for its peers).
    """
    found = []
    imports = keras3_imports(program) if workers > 1 and uses_multi_worker_strategy(program) else []
    if imports:
        found.append(
            f"{', '.join(imports)} imports keras, which is Keras 3: its fit fails under "
            f"MultiWorkerMirroredStrategy on {workers} workers (keras-team/keras#20585, a "
            "PerReplica error; a custom loop with strategy.run works); use tf.keras (tf-keras "
            "unless spec.keras is keras3) or `import tf_keras as keras`"
        )
    assignments = tf_config_assignments(program)
    if assignments:
        found.append(
            f"{', '.join(assignments)} sets TF_CONFIG, replacing the one tflaunch gives each "
            "worker (every worker would then claim the same index); remove it and read "
            "os.environ['TF_CONFIG'], or set it only `if 'TF_CONFIG' not in os.environ`"
        )
    if workers <= 1:
        late = strategy_late_message(program)  # more than one: `program.validate`'s error
        return [*found, late] if late else found
    alone = (
        f"each of the {workers} workers would train its own copy of the model, never synchronized"
    )
    strategies = one_machine_strategies(program)
    if strategies:
        found.append(
            f"the program creates only strategies of one machine ({', '.join(strategies)}): "
            f"{alone}; create tf.distribute.MultiWorkerMirroredStrategy() instead (it reads "
            f"the TF_CONFIG each worker is given): {STRATEGY_FIRST}"
        )
    elif strategies is not None:
        found.append(
            "no file of the program creates tf.distribute.MultiWorkerMirroredStrategy: "
            f"{alone} (if a library it imports creates the strategy, ignore this)"
        )
    elif never_enters_a_scope(program):
        found.append(
            "the program creates MultiWorkerMirroredStrategy but never enters "
            f"strategy.scope(): a model built outside it is not mirrored, and {alone}; build "
            "and compile the model (and optimizer) under `with strategy.scope():`"
        )
    saves = chief_only_saves(program)
    if saves:
        found.append(
            f"only the chief saves ({', '.join(saves)}): under MultiWorkerMirroredStrategy "
            "saving runs collective operations every worker must join, so the chief would "
            "wait for peers that have finished; let every worker save, the chief to its "
            "path and the others to a temporary directory"
        )
    return found


TENSORFLOW_MODULES = {
    "tensorflow": "tf",
    "keras": "keras",
    "tf_keras": "keras",
    "tensorflow_datasets": "tfds",
}
"""The modules whose calls run TensorFlow, and the short name a call is judged by."""
BEFORE_THE_STRATEGY_IS_FINE = (
    "tf.distribute.",
    "tf.config.",
    "tf.random.set_seed",
    "tf.get_logger",
    "tf.executing_eagerly",
    "tf.debugging.set_log_device_placement",
    "tf.autograph.set_verbosity",
    "tf.compat.v1.logging.",
    "tf.io.gfile.",
    "keras.utils.set_random_seed",
    "keras.layers.",
    "keras.losses.",
    "keras.callbacks.",
    "keras.datasets.",
    "keras.mixed_precision.",
    "tfds.disable_progress_bar",
)
"""Calls that leave TensorFlow's runtime unstarted, so the strategy may still configure it
(measured with TF 2.21: `tf.config.list_physical_devices`, `tf.random.set_seed`, a layer's
constructor are fine; `tf.constant`, `tf.data`, `tf.keras.Sequential([Input, ...])`,
`tf.config.list_logical_devices` start it)."""
STARTS_THE_RUNTIME = ("tf.config.list_logical_devices", "tf.config.experimental_connect_to")
"""tf.config calls that do start it."""
MAX_CALL_DEPTH = 8
"""How deep `strategy_created_late` follows the program's own functions."""


def _dotted(node: ast.expr) -> str | None:
    """`tf.data.Dataset.range` for that attribute chain on a name; None for anything else
    (a call's result, a subscript)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _tensorflow_names(tree: ast.Module) -> dict[str, str]:
    """What each name bound by an import of a TensorFlow module stands for, in the short form
    of TENSORFLOW_MODULES: `import tensorflow as tf` -> {"tf": "tf"}, `from tensorflow import
    keras` -> {"keras": "keras"}, `from tensorflow.keras.layers import Dense` -> {"Dense":
    "keras.layers.Dense"}."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` binds a; `import a.b as c` binds a.b
            pairs = [
                (alias.name, alias.asname) if alias.asname else (alias.name.split(".")[0],) * 2
                for alias in node.names
            ]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            pairs = [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
        else:
            continue
        for full, bound in pairs:
            short = _short(full)
            if short is not None:
                names[bound] = short
    return names


def _short(full: str) -> str | None:
    """`tensorflow.keras.layers` -> `keras.layers`, `tensorflow.data` -> `tf.data`, `tf_keras`
    -> `keras`; None for a module that is not TensorFlow's."""
    root, _, rest = full.partition(".")
    if root not in TENSORFLOW_MODULES:
        return None
    if root == "tensorflow" and (rest == "keras" or rest.startswith("keras.")):
        root, _, rest = rest.partition(".")
    short = TENSORFLOW_MODULES.get(root, root)
    return f"{short}.{rest}" if rest else short


def _starts_tensorflow(short: str) -> bool:
    if short.startswith(STARTS_THE_RUNTIME):
        return True
    return not short.startswith(BEFORE_THE_STRATEGY_IS_FINE) and short not in ("tf", "keras")


def _calls_in_order(node: ast.AST) -> list[ast.Call]:
    """The calls a simple statement makes, in the order of the source (a call's callee and
    arguments come after it in that order, and the statement stops at the strategy anyway);
    not those in a lambda, which runs later."""
    found = []
    todo = [node]
    while todo:
        current = todo.pop()
        if isinstance(current, ast.Lambda):
            continue
        if isinstance(current, ast.Call):
            found.append(current)
        todo.extend(ast.iter_child_nodes(current))
    return sorted(found, key=lambda call: (call.lineno, call.col_offset))


BLOCKS = ("body", "handlers", "orelse", "finalbody")
"""The statement lists of a compound statement, in the order they may run."""


class _StartupOrder:
    """Runs through the entry file as Python would, statement by statement (both branches of
    an `if`, a loop's body once, into the functions of the program it calls and the modules of
    it it imports) up to the first multi-worker strategy it creates; remembers the first
    TensorFlow call before that."""

    def __init__(self, program: Program) -> None:
        self.trees = dict(_python_trees(program))
        self.names = {rel: _tensorflow_names(tree) for rel, tree in self.trees.items()}
        self.first_call: tuple[str, int, str] | None = None
        self.strategy: tuple[str, int] | None = None
        self.entered: set[int] = set()

    def run_file(self, rel: str, depth: int = 0) -> bool:
        """True once the strategy is found."""
        return self._run(self.trees[rel].body, rel, depth)

    def _run(self, statements: list[ast.stmt], rel: str, depth: int) -> bool:
        for statement in statements:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(statement, ast.Import | ast.ImportFrom):
                if self._import(statement, depth):
                    return True
                continue
            blocks = [getattr(statement, block, None) for block in BLOCKS]
            if any(blocks):  # if, for, while, with, try: their own expressions, then blocks
                heads = [getattr(statement, f, None) for f in ("test", "iter", "items")]
                if any(self._expression(head, rel, depth) for head in heads if head):
                    return True
                for block in blocks:
                    for part in block or ():
                        inner = part.body if isinstance(part, ast.ExceptHandler) else [part]
                        if self._run(inner, rel, depth):
                            return True
                continue
            if self._expression(statement, rel, depth):
                return True
        return False

    def _expression(self, node: Any, rel: str, depth: int) -> bool:
        calls = (
            [c for part in node for c in _calls_in_order(part)]
            if isinstance(node, list)
            else _calls_in_order(node)
        )
        for call in calls:
            if _called_name(call) in MULTI_WORKER_STRATEGIES:
                self.strategy = (rel, call.lineno)
                return True
            dotted = _dotted(call.func)
            if dotted is None:
                continue
            root, _, rest = dotted.partition(".")
            meaning = self.names[rel].get(root)
            if meaning is not None:
                short = f"{meaning}.{rest}" if rest else meaning
                short = (
                    short.replace("tf.keras.", "keras.", 1) if short[:9] == "tf.keras." else short
                )
                if self.first_call is None and _starts_tensorflow(short):
                    self.first_call = (rel, call.lineno, dotted)
                continue
            if self._enter(rel, root, rest, depth):
                return True
        return False

    def _enter(self, rel: str, root: str, rest: str, depth: int) -> bool:
        """Into `f()` defined in this file, or `module.f()` of a module of the program."""
        if depth >= MAX_CALL_DEPTH:
            return False
        target, name = (rel, root) if not rest else (f"{root}.py", rest)
        tree = self.trees.get(target)
        if tree is None or "." in name:
            return False
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                if id(node) in self.entered:
                    return False
                self.entered.add(id(node))
                return self._run(node.body, target, depth + 1)
        return False

    def _import(self, statement: ast.Import | ast.ImportFrom, depth: int) -> bool:
        """A module of the program imported runs its top level, once."""
        if isinstance(statement, ast.Import):
            modules = [alias.name for alias in statement.names]
        else:
            modules = [statement.module] if statement.level == 0 and statement.module else []
        for module in modules:
            rel = f"{module.replace('.', '/')}.py"
            tree = self.trees.get(rel)
            if tree is not None and id(tree) not in self.entered and depth < MAX_CALL_DEPTH:
                self.entered.add(id(tree))
                if self.run_file(rel, depth + 1):
                    return True
        return False


def strategy_created_late(program: Program) -> tuple[str, str] | None:
    """(`file:line name` of the first TensorFlow call, `file:line` of the strategy) when the
    program calls TensorFlow before it creates MultiWorkerMirroredStrategy; None when the
    strategy comes first, or the entry file never creates one on its way.

    TensorFlow starts its runtime at the first call that needs it (a tensor, a dataset, a
    model's variables); the strategy must configure the collective ops before that, and
    otherwise raises `RuntimeError: Collective ops must be configured at program startup`
    (TF 2.21), on every worker, whatever their number. TensorFlow's own single-machine
    tutorials (distribute/keras.ipynb) build their datasets first: ported to MWMS, they
    fail so.
    """
    order = _StartupOrder(program)
    if program.name not in order.trees or not order.run_file(program.name):
        return None
    if order.strategy is None or order.first_call is None:
        return None
    (call_file, call_line, call), (file, line) = order.first_call, order.strategy
    return f"{call_file}:{call_line} {call}", f"{file}:{line}"


STRATEGY_FIRST = "create the strategy at program start, before any other TensorFlow call"
"""The remedy for a strategy created too late, said before the workers start and after."""


def strategy_late_message(program: Program) -> str | None:
    """The sentence for `strategy_created_late`, None when the program does it right."""
    late = strategy_created_late(program)
    if late is None:
        return None
    call, strategy = late
    return (
        f"{call} runs TensorFlow before {strategy} creates MultiWorkerMirroredStrategy, "
        "which then fails (RuntimeError: Collective ops must be configured at program "
        f"startup); {STRATEGY_FIRST}"
    )
