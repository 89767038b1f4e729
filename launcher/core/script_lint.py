"""What a `spec.script` program shows before it runs: the mistakes read from its source.

Each check walks the program's syntax trees (`ast`, nothing is imported or run) and answers
with the `file:line` of what it found; `warnings` words them, said by the CLI (`local`,
`submit`) and as the operator's Warning events. Apart from `launcher.core.script`, which
loads and carries the program's files, so that reading the files and judging the code
change apart. Whether the strategy comes before every other TensorFlow call is
`launcher.core.strategy_order`'s (an error with several workers, raised by `program.validate`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from launcher.core import contract, script
from launcher.core.script import Program
from launcher.core.strategy_order import (
    MULTI_WORKER_STRATEGIES,
    STRATEGY_FIRST,
    called_name,
    dotted,
    strategy_late_message,
)

TF_CONFIG = contract.ENV_TF_CONFIG


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
    for rel, tree in script.python_trees(program):
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
    for rel, tree in script.python_trees(program):
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in KERAS_3_ONLY:
                name = dotted(node) or ""
                if name.split(".")[-2:-1] == ["keras"]:
                    found.append(f"{rel}:{node.lineno} {name}")
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
    for rel, tree in script.python_trees(program):
        guarded: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and _names_tf_config(node.test):
                guarded.update(id(child) for child in ast.walk(node) if child is not node.test)
        for node in ast.walk(tree):
            if id(node) not in guarded and _sets_tf_config(node):
                found.append((rel, node.lineno))  # type: ignore[attr-defined]
    return [f"{rel}:{line}" for rel, line in sorted(set(found))]  # one per line, in order


ONE_MACHINE_STRATEGIES = frozenset(
    {"MirroredStrategy", "OneDeviceStrategy", "CentralStorageStrategy"}
)
"""Strategies that span the devices of one machine only: under several workers each trains
its own copy of the model."""


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
    trees = list(script.python_trees(program))
    if any(_mentions_multi_worker_strategy(tree) for _, tree in trees):
        return None
    found: set[tuple[str, int, str]] = set()
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and called_name(node) in ONE_MACHINE_STRATEGIES:
                found.add((rel, node.lineno, str(called_name(node))))
    return [f"{rel}:{line} {name}" for rel, line, name in sorted(found)]


SCOPE_CALLS = frozenset({"scope", "experimental_set_strategy"})
"""What puts variables under a strategy: `with strategy.scope():`, or the strategy set for
the whole program (`tf.distribute.experimental_set_strategy`)."""


def never_enters_a_scope(program: Program) -> bool:
    """Whether the program creates a multi-worker strategy but no file of it ever calls
    `.scope()`: a Keras model built outside the scope is not mirrored, `fit` then trains it
    with the default strategy, and each worker trains its own copy, silently."""
    trees = [tree for _, tree in script.python_trees(program)]
    if not any(_mentions_multi_worker_strategy(tree) for tree in trees):
        return False
    return not any(
        isinstance(node, ast.Call) and called_name(node) in SCOPE_CALLS
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
            if not isinstance(node, ast.Call) or called_name(node) not in SAVE_CALLS:
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
    for rel, tree in script.python_trees(program):
        for node in ast.walk(tree):
            if not isinstance(node, ast.If):
                continue
            branch = _chief_branch(node.test)
            if branch is None:
                continue
            for call in _saves(node.body if branch else node.orelse):
                found.add((rel, call.lineno, str(called_name(call))))
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
