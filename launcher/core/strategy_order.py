"""Whether a program creates MultiWorkerMirroredStrategy before anything else of TensorFlow.

The strategy configures TensorFlow's collective operations, which only an unstarted runtime
allows; a dataset, a tensor or a model built first makes it raise `RuntimeError: Collective
ops must be configured at program startup` (TF 2.21) on every worker. `strategy_created_late`
reads the order from the program's source, as Python would run it, without running it.
"""

from __future__ import annotations

import ast
from typing import Any

from launcher.core.script import Program, python_trees

MULTI_WORKER_STRATEGIES = frozenset({"MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy"})
"""The strategies that read TF_CONFIG and synchronize the workers."""


def called_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


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
    "keras.utils.get_file",
    "keras.utils.to_categorical",
    "keras.backend.set_floatx",
    "tf.TensorSpec",
    "tf.TensorShape",
    "tf.as_dtype",
    "tf.dtypes.",
    "tfds.disable_progress_bar",
)
"""Calls that leave TensorFlow's runtime unstarted, so the strategy may still configure it
(measured with TF 2.21, tf-keras and Keras 3: `tf.config.list_physical_devices`,
`tf.random.set_seed`, a layer's, a loss's or a callback's constructor, `tf.TensorSpec`,
`to_categorical`, `tf.io.gfile` are fine; `tf.constant`, `tf.data`,
`tf.keras.Sequential([Input, ...])`, `tf.config.list_logical_devices` start it)."""
STARTS_THE_RUNTIME = (
    "tf.config.list_logical_devices",
    "tf.config.experimental.list_logical_devices",
    "tf.config.experimental.get_memory",
    "tf.config.experimental_connect_to",
)
"""tf.config calls that do start it."""
MAX_CALL_DEPTH = 8
"""How deep `strategy_created_late` follows the program's own functions."""


def dotted(node: ast.expr) -> str | None:
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
    """Runs through the entry file as Python would, statement by statement (either branch of
    an `if`, a loop's body once, into the functions of the program it calls and the modules of
    it it imports) up to the first multi-worker strategy it creates; remembers the first
    TensorFlow call before that."""

    def __init__(self, program: Program) -> None:
        self.trees = dict(python_trees(program))
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
            if isinstance(statement, ast.If):
                if self._branches(statement, rel, depth):
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

    def _branches(self, statement: ast.If, rel: str, depth: int) -> bool:
        """An `if`: its test, then either branch from the same state. A strategy created in
        one branch is late only for the calls on its own way (a call in the other branch
        never ran); after the `if`, a call in either branch may have."""
        if self._expression(statement.test, rel, depth):
            return True
        before = self.first_call
        if self._run(statement.body, rel, depth):
            return True
        after_body, self.first_call = self.first_call, before
        if self._run(statement.orelse, rel, depth):
            return True
        self.first_call = before or after_body or self.first_call
        return False

    def _expression(self, node: Any, rel: str, depth: int) -> bool:
        calls = (
            [c for part in node for c in _calls_in_order(part)]
            if isinstance(node, list)
            else _calls_in_order(node)
        )
        for call in calls:
            if called_name(call) in MULTI_WORKER_STRATEGIES:
                self.strategy = (rel, call.lineno)
                return True
            name = dotted(call.func)
            if name is None:
                continue
            root, _, rest = name.partition(".")
            meaning = self.names[rel].get(root)
            if meaning is not None:
                short = f"{meaning}.{rest}" if rest else meaning
                short = (
                    short.replace("tf.keras.", "keras.", 1) if short[:9] == "tf.keras." else short
                )
                if self.first_call is None and _starts_tensorflow(short):
                    self.first_call = (rel, call.lineno, name)
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
