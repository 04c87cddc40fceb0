"""What translated code calls at run time (Fluid 1.8's ``convert_operators``).

:mod:`.ast_transform` rewrites a dygraph function's ``if``, ``while``, ``for``, ``and``/``or``/
``not``, ``==``/``!=``, ``x if c else y``, ``assert``, ``print``, ``len``, ``x.numpy()`` and
calls into calls of these helpers (and :func:`translate` compiles the result).
Each decides when the translated function runs (building a program): on a program Variable
it builds the control-flow ops (``cond``'s conditional blocks, a ``while`` loop, logical and
comparison ops, a ``print`` op); on Python values it does what Python does, so that Python
control flow on shapes, flags and loop counts still runs once, while the program is built.

Variables assigned in a branch or loop body go in and out of the generated functions by name;
one that has no value yet is an :class:`Undefined`, which says what happened when it is used.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import sys
import types
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...framework import Variable, VarType, default_main_program, in_dygraph_mode
from ...layers import compare, control_flow, debug, loops, tensor
from ..base import to_variable
from ..layers import Layer
from .ast_transform import RUNTIME, code_level, function_def, transformed, verbose

__all__ = ["Undefined", "as_sequence", "checked_return", "convert_assert", "convert_call",
           "convert_equal", "convert_ifelse", "convert_ifexp", "convert_len",
           "convert_logical_and", "convert_logical_not", "convert_logical_or",
           "convert_not_equal", "convert_numpy", "convert_print", "convert_while_loop",
           "load_name", "range_condition", "translate"]


class Undefined:
    """The value of a name that the translated code has not assigned on the path taken (a
    variable set in one branch of a program ``if`` only, or in a loop body only).

    Any use raises a NameError that says where the name lost its value."""

    __slots__ = ("name", "reason")

    def __init__(self, name: str, reason: str = "") -> None:
        self.name = name
        self.reason = reason

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        why = f": {self.reason}" if self.reason else ""
        raise NameError(f"name {self.name!r} has no value here{why}")

    __getattr__ = _fail  # type: ignore[assignment]
    __call__ = __bool__ = __len__ = __iter__ = __getitem__ = __index__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail
    __truediv__ = __rtruediv__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _fail
    __array__ = __float__ = __int__ = _fail

    def __repr__(self) -> str:
        return f"<undefined {self.name}>"


def checked_return(value: Any) -> Any:
    """A translated function's result, refused when part of it has no value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Undefined):
            item._fail()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return value


def load_name(scope: dict, name: str) -> Any:
    """``scope[name]``, or an :class:`Undefined` when the name has no value yet (what a
    generated branch or loop function is given for a name assigned in it)."""
    return scope[name] if name in scope else Undefined(name, "it is assigned later")


def _is_program_var(value: Any) -> bool:
    """A Variable of the program being built (not a dygraph variable with a value)."""
    return isinstance(value, Variable) and not in_dygraph_mode()


def _as_pred(value: Any, where: str) -> Variable:
    """A program condition as a bool of one value (a number is true when it is not zero, as
    Python's ``if x`` and Fluid 1.8's translation of it)."""
    size = None if value.shape is None or any(d < 0 for d in value.shape) else int(
        np.prod(value.shape))
    if size not in (None, 1):
        raise TypeError(f"{where}: the condition {value.name!r} has shape {list(value.shape)}; "
                        "a condition must hold one value: reduce it first (e.g. "
                        "layers.reduce_all, or compare a reduce_mean)")
    return _bool_var(value)


# -- if / else ---------------------------------------------------------------------------------
def convert_ifelse(pred: Any, true_fn: Callable, false_fn: Callable, args: Sequence[Any],
                   names: Sequence[str], where: str, stores: Sequence[str] = (),
                   live: Sequence[str] | None = None, grows: Sequence[str] = ()) -> tuple:
    """``if pred`` with the branch functions of the translated code.

    Each branch function takes the current values of ``names`` (the variables the ``if``
    assigns) and returns their values after the branch. On a program Variable both branches
    are built into conditional blocks and each variable merged with ``select_input``
    (``layers.cond``); otherwise the branch Python picks runs.

    A list that a branch grows with ``name.append(x)`` (``grows``) becomes a tensor array
    before a program ``if``, as Fluid 1.8's ListTransformer makes it: the branch writes its
    items at the array's end when its condition holds, and the name holds the array after the
    ``if``.

    A variable that only one branch sets has no value after the ``if`` (an
    :class:`Undefined`), unless it is in ``live`` (it may be read later): then, as in Fluid
    1.8, it holds that branch's value when that branch runs, and a run that takes the other
    branch and reads it fails, naming it.

    Raises
    ------
    NotImplementedError
        On a program condition, a branch assigns an attribute or an item (``stores``: both
        branches would run while building, so the assignment would not depend on ``pred``).
    TypeError
        On a program condition, the branches leave a variable with values that cannot be
        merged (a Variable in one, a string in the other; different dtypes).
    """
    if not _is_program_var(pred):
        return tuple((true_fn if pred else false_fn)(*args))
    pred = _as_pred(pred, f"if at {where}")
    _refuse_stores(stores, f"if at {where}", "branches", "both branches are built")
    args = [_as_tensor_array(v, n, f"if at {where}") if n in grows and isinstance(v, list)
            else v for v, n in zip(args, names, strict=False)]
    # each variable's value before the if (an expression's value has none)
    before = args + [None] * (len(names) - len(args))
    # both branches built, each in a conditional block; only Variables leave the blocks (the
    # rest is merged below), then each variable is paired across the sides by name; a tensor
    # array the branch wrote in place stays where it is
    values: dict[str, list] = {}
    outs: dict[str, list] = {}
    sizes = _list_sizes(args, names)
    for side, fn, cond in (("true", true_fn, pred), ("false", false_fn, tensor.logical_not(pred))):
        with control_flow.ConditionalBlock([cond], is_scalar_condition=True).block():
            values[side] = list(fn(*args))
            outs[side] = [control_flow._copy_to_parent(v)
                          for v, b in zip(values[side], before, strict=True)
                          if _is_program_var(v) and not _in_place(v, b)]
        grown = sorted(n for n, (items, size) in sizes.items() if len(items) != size)
        _refuse_stores([f"{n}.append(...)" for n in grown], f"if at {where}", "branches",
                       "both branches are built")
    mask = tensor.cast(pred, "int32")
    it_true, it_false = iter(outs["true"]), iter(outs["false"])
    merged = []
    for name, t, f, b in zip(names, values["true"], values["false"], before, strict=True):
        if _in_place(t, b) and _in_place(f, b):
            merged.append(b)
            continue
        t_var = _is_program_var(t) and not _in_place(t, b)
        f_var = _is_program_var(f) and not _in_place(f, b)
        t_out = next(it_true) if t_var else None
        f_out = next(it_false) if f_var else None
        merged.append(_merge(name, where, t, f, t_out, f_out, mask,
                             live is None or name in live))
    return tuple(merged)


def _in_place(value: Any, before: Any) -> bool:
    """Whether a branch left ``value`` as the tensor array it had before (written in place)."""
    return value is before and _is_tensor_array(value)


def convert_ifexp(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any],
                  where: str) -> Any:
    """``a if pred else b``: an ``if`` whose branches give one value (:func:`convert_ifelse`)."""
    return convert_ifelse(pred, lambda: (true_fn(),), lambda: (false_fn(),), (),
                          ("the value of the expression",), where)[0]


def _merge(name: str, where: str, t: Any, f: Any, t_out: Variable | None,
           f_out: Variable | None, mask: Variable, live: bool) -> Any:
    """One variable after a program ``if``: ``t`` and ``f`` are its values at the end of the
    branches, ``t_out``/``f_out`` their copies out of the blocks (Variables only); ``live``:
    it may be read after the ``if``."""
    if isinstance(t, Undefined) or isinstance(f, Undefined):
        set_when = "false" if isinstance(t, Undefined) else "true"
        out = f_out if set_when == "false" else t_out
        if live and out is not None and not (isinstance(t, Undefined) and isinstance(
                f, Undefined)):
            # set on one side only: the other side's input to select_input is never computed,
            # and select_input fails, naming it, on a run that takes that side
            unset = default_main_program().current_block().create_var(
                name=f"{name}@not_set_when_the_if_at_{where}_is_"
                     f"{'false' if set_when == 'true' else 'true'}",
                dtype=out.dtype, shape=out.shape)
            pair = [out, unset] if set_when == "false" else [unset, out]
            return control_flow.select_input(pair, mask)
        return Undefined(name, f"the if at {where} gives it a value only when its condition is "
                               f"{set_when}; give it one in both branches (or before the if) "
                               "to use it after")
    if t_out is not None and f_out is not None:
        if t_out.dtype != f_out.dtype:
            raise TypeError(f"if at {where}: {name!r} is {t_out.dtype} after the true branch "
                            f"and {f_out.dtype} after the false one; cast one of them")
        return control_flow.select_input([f_out, t_out], mask)
    if t_out is None and f_out is None:
        if t is f or _same_python_value(t, f):
            return t
        if _is_number(t) and _is_number(f):  # a flag or a count set by a branch
            dtype = _number_dtype(t, f)
            return control_flow.select_input([tensor.fill_constant([1], dtype, f),
                                              tensor.fill_constant([1], dtype, t)], mask)
        raise TypeError(f"if at {where}: {name!r} is {t!r} after the true branch and {f!r} "
                        "after the false one, Python values that a condition on program values "
                        "cannot choose between; make them Variables (layers.fill_constant)")
    # a Variable on one side, a Python number on the other: the number as a constant
    var, other = (t_out, f) if t_out is not None else (f_out, t)
    if not _is_number(other):
        raise TypeError(f"if at {where}: {name!r} is a Variable after one branch and a "
                        f"{type(other).__name__} after the other; make both Variables")
    const = tensor.fill_constant([1], var.dtype, other)
    pair = [const, var] if t_out is not None else [var, const]
    return control_flow.select_input(pair, mask)


def _list_sizes(args: Sequence[Any], names: Sequence[str]) -> dict[str, tuple[list, int]]:
    """The Python lists among a statement's variables and their sizes before it: a branch
    built while the program is built must not grow one (both branches would). (An ``x if c
    else y`` names its value and passes no variables.)"""
    return {n: (v, len(v)) for n, v in zip(names, args, strict=False) if isinstance(v, list)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, np.number))


def _number_dtype(*values: Any) -> str:
    """The dtype of a constant holding Python numbers: bool, int64 or float32."""
    if all(isinstance(v, (bool, np.bool_)) for v in values):
        return "bool"
    if all(isinstance(v, (int, np.integer)) for v in values):
        return "int64"
    return "float32"


def _same_python_value(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # noqa: BLE001  (arrays and odd objects: not the same)
        return False


def _refuse_stores(stores: Sequence[str], where: str, parts: str, why: str) -> None:
    if stores:
        raise NotImplementedError(
            f"{where}: the {parts} change {sorted(stores)}, Python objects; on a condition "
            f"that is a program Variable {why} once while the program is built, so the change "
            "would not depend on the values. Keep the values in variables (a local list that "
            "a program loop or branch grows with name.append(x) becomes a tensor array) and "
            "set the attribute or item after the statement")


# -- loops ---------------------------------------------------------------------------------------
def _is_tensor_array(value: Any) -> bool:
    return _is_program_var(value) and value.type == VarType.LOD_TENSOR_ARRAY


def _as_tensor_array(items: list, name: str, statement: str) -> Variable:
    """A Python list grown in a program loop or branch (``statement``) as a tensor array
    holding its items (Fluid 1.8's ListTransformer makes such a list a ``create_array``;
    float32 when it is empty)."""
    bad = [type(v).__name__ for v in items if not _is_program_var(v)]
    if bad:
        raise TypeError(f"{statement}: the list {name!r} holds {bad[0]} items; a loop or "
                        "branch on program values grows a list of Variables (a tensor array)")
    array = loops.create_array(items[0].dtype if items else "float32")
    for k, item in enumerate(items):
        loops.array_write(item, tensor.fill_constant([1], "int64", k), array)
    return array


def convert_append(items: Any, value: Any) -> Any:
    """``items.append(value)`` for a name: a list grows in place; a tensor array (the list
    that a program loop carries) gets ``value`` written at its end. Returns ``items``."""
    if _is_tensor_array(items):
        if not _is_program_var(value):
            raise TypeError(f"{items.name}.append({value!r}): in a loop or branch on program "
                            "values the list is a tensor array, whose items are Variables; "
                            "append a Variable (layers.fill_constant for a number)")
        loops.array_write(value, loops.array_length(items), items)
        return items
    items.append(value)
    return items


def convert_while_loop(cond_fn: Callable, body_fn: Callable, args: Sequence[Any],
                       names: Sequence[str], where: str, stores: Sequence[str] = ()) -> tuple:
    """``while cond: body`` with the loop functions of the translated code.

    ``cond_fn`` and ``body_fn`` take the current values of ``names`` (the variables the body
    assigns); ``body_fn`` returns their values after one pass. When the condition is a program
    Variable the loop becomes a ``while`` op (``layers.while_loop``): the variables that hold
    Variables or numbers before it are its loop variables (numbers become constants); the ones
    with no value before it are set anew by every pass and have none after it. Otherwise the
    loop runs in Python (unrolled into the program, as Python runs it).

    Raises
    ------
    NotImplementedError
        The body of a program loop assigns an attribute or an item, or changes a container
        (``stores``): it is built once.
    TypeError
        A loop variable of a program loop holds something that cannot be a Variable.
    """
    args = list(args)
    first = cond_fn(*args)
    if not _is_program_var(first):
        while first:
            args = list(body_fn(*args))
            first = cond_fn(*args)
            if _is_program_var(first):
                raise TypeError(
                    f"while at {where}: the condition became a program Variable after the "
                    "first pass; give the variables it reads Variable values before the loop")
        return tuple(args)
    first = _as_pred(first, f"while at {where}")
    _refuse_stores(stores, f"while at {where}", "loop body", "the body is built")
    carried = [i for i, v in enumerate(args) if not isinstance(v, Undefined)]
    for i in carried:
        value = args[i]
        if isinstance(value, list):  # grown by name.append(x): a tensor array, as Fluid 1.8
            args[i] = _as_tensor_array(value, names[i], f"while at {where}")
            continue
        if _is_tensor_array(value):  # written in place by the loop: nothing to keep apart
            continue
        if _is_program_var(value):
            # the loop overwrites its variables each pass: its own copies, so that the
            # values before it stay for the gradients of the ops that made them
            args[i] = tensor.assign(value)
            continue
        if _is_number(value):
            args[i] = tensor.fill_constant([1], _number_dtype(value), value)
        else:
            raise TypeError(f"while at {where}: {names[i]!r} holds a {type(value).__name__}, "
                            "which a loop on program values cannot carry: make it a Variable")

    def full(values: Sequence[Any]) -> list:
        out = list(args)
        for i, v in zip(carried, values, strict=True):
            out[i] = v
        return out

    def body(*values: Any) -> list:
        after = list(body_fn(*full(values)))
        result = []
        for i in carried:
            value = after[i]
            if not _is_program_var(value):
                if _is_number(value):
                    value = tensor.fill_constant([1], args[i].dtype, value)
                else:
                    raise TypeError(f"while at {where}: the body leaves {names[i]!r} a "
                                    f"{type(value).__name__}; a program loop carries Variables")
            result.append(value)
        return result

    outs = loops.while_loop(lambda *values: _as_pred(cond_fn(*full(values)), where), body,
                            [args[i] for i in carried])
    result = full(outs)
    for i, value in enumerate(result):
        if isinstance(value, Undefined):
            result[i] = Undefined(names[i], f"the while loop at {where} assigns it in its body "
                                            "only; give it a value before the loop")
    return tuple(result)


def as_sequence(items: Any) -> Any:
    """What a translated ``for x in items`` indexes: the items as a list (a Python loop, which
    runs while the program is built); a Variable's rows when the program knows how many;
    else the Variable itself, whose ``len`` is then a Variable: a loop on program values
    that takes row ``items[i]`` at each pass (Fluid 1.8's ``for x in var``)."""
    if _is_program_var(items):
        n = convert_len(items)
        return [items[i] for i in range(n)] if isinstance(n, int) else items
    return items if isinstance(items, (list, tuple)) else list(items)


def range_condition(i: Any, stop: Any, step: Any) -> Any:
    """The condition of a translated ``for i in range(start, stop, step)``."""
    if isinstance(step, (int, np.integer)):
        if step == 0:
            raise ValueError("range() arg 3 must not be zero")
        return i < stop if step > 0 else i > stop
    raise TypeError("for ... in range(): a step that is a program Variable is not "
                    "implemented; give the step as a Python int")


# -- logical and comparison operators -------------------------------------------------------------
def _bool_var(value: Any) -> Variable:
    if _is_program_var(value):
        return value if value.dtype == "bool" else tensor.cast(value, "bool")
    return tensor.fill_constant([1], "bool", bool(value))


def convert_logical_and(lhs: Callable[[], Any], rhs: Callable[[], Any]) -> Any:
    """``a and b``: Python's short circuit on Python values, ``logical_and`` on Variables."""
    left = lhs()
    if not _is_program_var(left):
        return rhs() if left else left
    return tensor.logical_and(_bool_var(left), _bool_var(rhs()))


def convert_logical_or(lhs: Callable[[], Any], rhs: Callable[[], Any]) -> Any:
    """``a or b``: Python's short circuit on Python values, ``logical_or`` on Variables."""
    left = lhs()
    if not _is_program_var(left):
        return left if left else rhs()
    return tensor.logical_or(_bool_var(left), _bool_var(rhs()))


def convert_logical_not(value: Any) -> Any:
    """``not a``: ``logical_not`` on a Variable."""
    return tensor.logical_not(_bool_var(value)) if _is_program_var(value) else not value


def _compare(op: Callable, left: Any, right: Any) -> Variable:
    if not _is_program_var(left):
        left, right = right, left
    if not _is_program_var(right):
        right = tensor.fill_constant([1], left.dtype, right)
    return op(left, right)


def convert_equal(left: Any, right: Any) -> Any:
    """``a == b``: the ``equal`` op when either side is a Variable (Fluid 1.8's ``==``)."""
    if _is_program_var(left) or _is_program_var(right):
        return _compare(tensor.equal, left, right)
    return left == right


def convert_not_equal(left: Any, right: Any) -> Any:
    """``a != b``: the ``not_equal`` op when either side is a Variable."""
    if _is_program_var(left) or _is_program_var(right):
        return _compare(compare.not_equal, left, right)
    return left != right


def convert_assert(cond: Any, message: Callable[[], Any] | None, where: str) -> None:
    """``assert cond, message``: an ``assert`` op (``layers.Assert``) on a program Variable,
    which fails the run when it is false; Python's assert otherwise."""
    if _is_program_var(cond):
        debug.Assert(_bool_var(cond))
        return
    if not cond:
        raise AssertionError(message() if message is not None else f"assert at {where}")


def convert_numpy(value: Any) -> Any:
    """``x.numpy()``: in a program the values are the Variable itself (so ``x.numpy()[0] > 0``
    compares in the program, as Fluid 1.8's translation of it)."""
    return value if _is_program_var(value) else value.numpy()


# -- builtins ----------------------------------------------------------------------------------
def convert_len(value: Any) -> Any:
    """``len(x)``: a Variable's first dimension when the program knows it, else that dim when
    the program runs (an int64 Variable, from ``layers.shape`` as Fluid 1.8's); a tensor
    array's length (an int64 Variable)."""
    if _is_tensor_array(value):
        return loops.array_length(value)
    if _is_program_var(value):
        if not value.shape:
            raise TypeError(f"len({value.name!r}): a Variable without dims has no length")
        if value.shape[0] < 0:
            return tensor.cast(tensor.shape(value)[0], "int64")
        return int(value.shape[0])
    return len(value)


def convert_print(*args: Any, **kwargs: Any) -> None:
    """``print(...)``: a Variable is printed by a ``print`` op each time the program runs;
    the rest once, now."""
    variables = [a for a in args if _is_program_var(a)]
    if not variables:
        builtins.print(*args, **kwargs)
        return
    for var in variables:
        debug.Print(var)


# -- calls ---------------------------------------------------------------------------------------
_SKIP_MODULES = ("dask_fluid", "numpy", "builtins", "dask", "distributed", "functools",
                 "collections", "typing", "math", "inspect", "abc")


def convert_call(func: Any) -> Any:
    """The callee as translated code: a user's function or method is translated (once, then
    cached), a dygraph Layer's ``forward`` too; the framework's, numpy's and builtins are
    called as they are, and so are ``@declarative`` functions (they translate themselves
    when called outside dygraph mode)."""
    if func is to_variable and not in_dygraph_mode():
        return _to_program_variable
    if isinstance(func, Layer):
        forward = type(func).forward
        if not _user_code(forward):
            return func
        translated = translate(forward).__get__(func)
        return lambda *args, **kwargs: func._call_forward(translated, args, kwargs)
    if inspect.ismethod(func):
        if _user_code(func.__func__):
            return translate(func.__func__).__get__(func.__self__)
        return func
    if _user_code(func):
        return translate(func)
    return func


def _to_program_variable(value: Any, name: str | None = None, zero_copy: Any = None) -> Any:
    """``to_variable`` in a program: a Variable as it is, an array as a constant of the
    program (``assign``, as Fluid 1.8's translation)."""
    if isinstance(value, Variable):
        return value
    return tensor.assign(np.asarray(value))


def _compiled(func: Callable, tree: ast.Module) -> Callable:
    """The function ``tree`` defines, with ``func``'s globals (the module's own, live), its
    closure's cells and these helpers as :data:`RUNTIME`: compiled inside a factory whose
    parameters are those free names, so that the function's code reads them as closure
    variables, then made with the original cells (nothing is run, no name is bound)."""
    fdef = tree.body[0]
    free = [*(n for n in func.__code__.co_freevars if n != RUNTIME), RUNTIME]
    factory = function_def("_jst_factory", free, [fdef], ast.Name(id=fdef.name, ctx=ast.Load()))
    ast.copy_location(factory, fdef)
    ast.fix_missing_locations(factory)
    module = compile(ast.Module(body=[factory], type_ignores=[]),
                     inspect.getsourcefile(func) or "<declarative>", "exec")
    factory_code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    code = next(c for c in factory_code.co_consts
                if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=True))
    cells[RUNTIME] = types.CellType(sys.modules[__name__])
    done = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__,
                              tuple(cells[name] for name in code.co_freevars))
    done.__kwdefaults__, done.__doc__, done.__wrapped__ = (
        func.__kwdefaults__, func.__doc__, func)
    done.__qualname__ = func.__qualname__
    return done


def _user_code(func: Any) -> bool:
    """Whether ``func`` is the user's code still to translate (not the framework's, not a
    lambda, not a function of translated code: one that reads the runtime helpers)."""
    if not inspect.isfunction(func) or func.__name__ == "<lambda>":
        return False
    if RUNTIME in func.__code__.co_freevars:
        return False
    module = getattr(func, "__module__", None) or ""
    return module.split(".")[0] not in _SKIP_MODULES


# -- translation -----------------------------------------------------------------------------------
_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def translate(func: Callable) -> Callable:
    """``func`` with its control flow translated (:mod:`.ast_transform`), compiled with these
    helpers as its runtime; cached per function object.

    Raises
    ------
    TranslationError
        The source is not available or uses a construct that is not translated.
    """
    done = _CACHE.get(func)
    if done is None:
        tree = transformed(func)
        verbose(f"translated {func.__qualname__}")
        if code_level() > 0:
            print(f"# translated {func.__qualname__} (dygraph_to_static)\n{ast.unparse(tree)}")
        done = _compiled(func, tree)
        _CACHE[func] = done
    return done
