"""The source translation of ``@declarative``: a dygraph function rewritten so that its Python
control flow on tensors builds program ops (Fluid 1.8's ``ast_transformer`` and its passes).

:func:`translate` reads a function's source, rewrites it and compiles it beside the original
(same globals, its closure's values, the original file and line numbers in tracebacks):

- early ``return`` inside ``if`` becomes one return at the end (the statements after an ``if``
  whose branch returns move into its other branch; every return assigns ``_jst_ret``);
- ``for i in range(...)`` becomes a ``while`` on a counter;
- ``break`` and ``continue`` become flags (``_jst_brk_<k>``, ``_jst_cont_<k>``) that the loop
  condition and the following statements test;
- ``if``/``while`` become two generated functions each (the branches; the condition and the
  body) taking and returning, by name, the variables the statement assigns, and a call of
  :func:`.convert_operators.convert_ifelse` / ``convert_while_loop``;
- ``and``/``or``/``not``, ``==``/``!=``, ``x if c else y``, ``assert``, ``print``, ``len``,
  ``x.numpy()`` and the user's own calls go through the other ``convert_*`` helpers.

The helpers decide at run time whether a condition is a program Variable (build control-flow
ops) or a Python value (plain Python). Not translated, with an error that names it: ``return``
inside a loop, ``yield``, ``global``/``nonlocal``, and functions without source (lambdas,
functions typed into an interactive prompt).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import logging
import os
import textwrap
from collections.abc import Callable
from typing import Any

__all__ = ["RUNTIME", "TranslationError", "code_level", "function_def", "set_code_level",
           "set_verbosity", "source_of", "transformed", "translated_code", "verbose"]

logger = logging.getLogger(__package__)
#: ``set_code_level``/``set_verbosity``: above 0, translated code / translation steps are shown
_LEVELS = {"code": 0, "verbosity": 0}


def set_code_level(level: int = 100) -> None:
    """Print the translated code of each function as it is translated (Fluid 1.8's
    ``jit.set_code_level``; Fluid numbers its transformer passes, this translation has one
    result: any level above 0 prints it, 0 turns it off).

    Raises
    ------
    TypeError
        ``level`` is not an int.
    """
    _LEVELS["code"] = _level(level, "set_code_level")


def set_verbosity(level: int = 0) -> None:
    """Log each translation and program build at INFO on logger
    ``dask_fluid.dygraph.dygraph_to_static`` when ``level`` > 0 (Fluid 1.8's
    ``jit.set_verbosity``).

    Raises
    ------
    TypeError
        ``level`` is not an int.
    """
    _LEVELS["verbosity"] = _level(level, "set_verbosity")


def _level(level: Any, where: str) -> int:
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"{where}: level must be an int, got {type(level).__name__}")
    return level


def code_level() -> int:
    """The level :func:`set_code_level` set."""
    return _LEVELS["code"]


def verbose(message: str) -> None:
    """Log a translation step when the verbosity is above 0."""
    if _LEVELS["verbosity"] > 0:
        logger.info(message)

#: the name the translated code reaches :mod:`.convert_operators` by
RUNTIME = "_jst"
_FN, _RET, _BRK, _CONT, _IDX = "_jst_fn", "_jst_ret", "_jst_brk", "_jst_cont", "_jst_i"

#: calls that stay as they are (builtins whose meaning does not change on Variables)
_PLAIN_CALLS = frozenset({
    "range", "isinstance", "issubclass", "int", "float", "bool", "str", "list", "tuple", "dict",
    "set", "frozenset", "enumerate", "zip", "getattr", "setattr", "hasattr", "type", "min",
    "max", "abs", "sum", "sorted", "reversed", "iter", "next", "map", "filter", "any", "all",
    "id", "hash", "repr", "format", "round", "divmod", "callable", "object", "vars", "dir",
    "globals", "locals", "slice", "bytes", "chr", "ord", "super", RUNTIME})


#: methods that change a Python container in place: in a branch or loop on program values they
#: would run once while the program is built, whatever the values
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update",
                       "setdefault", "add", "discard", "popitem", "sort", "reverse"})


class TranslationError(NotImplementedError):
    """A construct of the function that the translation does not handle."""


def translated_code(func: Callable) -> str:
    """The translated source of ``func`` (``ProgramTranslator.get_code``)."""
    return ast.unparse(transformed(func))


def source_of(func: Callable) -> str:
    """``func``'s source, dedented.

    Raises
    ------
    TranslationError
        Python has no source for it.
    """
    if getattr(func, "__name__", "") == "<lambda>":
        raise TranslationError("a lambda cannot be translated by @declarative: define the "
                               "function with def")
    try:
        return textwrap.dedent(inspect.getsource(func))
    except (OSError, TypeError) as err:
        raise TranslationError(
            f"@declarative needs the source of {getattr(func, '__qualname__', func)!r}, which "
            "Python cannot find (a function typed into an interactive prompt, or made by "
            "exec): define it in a file or a notebook cell") from err


def transformed(func: Callable) -> ast.Module:
    """A module holding ``func``'s definition rewritten (its globals, its closure's variables
    and the runtime helpers, under :data:`RUNTIME`, are given when it is compiled)."""
    module = ast.parse(source_of(func))
    ast.increment_lineno(module, func.__code__.co_firstlineno - 1)
    fdef = module.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise TranslationError(f"@declarative translates functions defined with def; "
                               f"{func.__qualname__!r} is not one")
    fdef.decorator_list = []
    _refuse(fdef, func.__qualname__)
    for node in [fdef, *(n for n in ast.walk(fdef) if n is not fdef)]:
        if isinstance(node, ast.FunctionDef):  # nested functions are translated too
            node.body = _single_return(node.body)
    _Transformer(fdef, os.path.basename(inspect.getsourcefile(func) or "?")).visit(fdef)
    ast.fix_missing_locations(module)
    return module


def _refuse(fdef: ast.FunctionDef, qualname: str) -> None:
    for node in _own_nodes(fdef.body):
        what = ("yield" if isinstance(node, (ast.Yield, ast.YieldFrom)) else
                "global" if isinstance(node, ast.Global) else
                "nonlocal" if isinstance(node, ast.Nonlocal) else None)
        if what:
            raise TranslationError(f"{qualname} (line {node.lineno}) uses {what!r}, which "
                                   "@declarative does not translate")


def _walk(stmts: list[ast.stmt], enter: Callable[[ast.AST], bool]) -> Any:
    """The nodes of ``stmts``, and of the children ``enter`` lets in, recursively."""
    stack: list[ast.AST] = list(stmts)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if enter(child))


#: nodes with a scope of their own
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
           ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _own_nodes(stmts: list[ast.stmt], into_generated: bool = False) -> Any:
    """The nodes of ``stmts`` that belong to this function (not to nested defs, lambdas,
    classes and comprehensions, except the functions this translation generated when
    ``into_generated``)."""
    return _walk(stmts, lambda child: not isinstance(child, _SCOPES) or (
        into_generated and isinstance(child, ast.FunctionDef) and child.name.startswith(_FN)))


# -- early returns ------------------------------------------------------------------------------
def _ends(stmts: list[ast.stmt]) -> bool:
    """Whether every path through ``stmts`` ends in ``return`` or ``raise``."""
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    return isinstance(last, ast.If) and _ends(last.body) and _ends(last.orelse)


def _moved(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``stmts`` with the statements after an ``if`` whose one branch ends in a return moved
    into its other branch, so that every ``return`` is the last statement of its branch."""
    out: list[ast.stmt] = []
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.If):
            stmt.body, stmt.orelse = _moved(stmt.body), _moved(stmt.orelse)
            rest = stmts[i + 1:]
            t_ends, f_ends = _ends(stmt.body), _ends(stmt.orelse)
            if t_ends and f_ends:  # what follows never runs
                out.append(stmt)
                return out
            if rest and t_ends != f_ends:
                if t_ends:
                    stmt.orelse = _moved(stmt.orelse + rest)
                else:
                    stmt.body = _moved(stmt.body + rest)
                out.append(stmt)
                return out
        elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
            inner = [n for n in _own_nodes([stmt]) if isinstance(n, ast.Return)]
            if inner:
                kind = type(stmt).__name__.lower()
                raise TranslationError(f"return inside a {kind} statement (line "
                                       f"{inner[0].lineno}) is not translated by @declarative: "
                                       "set a variable there and return it after the "
                                       f"{kind}")
        out.append(stmt)
    return out


def _single_return(body: list[ast.stmt]) -> list[ast.stmt]:
    body = _moved(body)
    if not any(isinstance(n, ast.Return) for n in _own_nodes(
            [s for s in body if isinstance(s, ast.If)])):
        return body  # no return inside an if: nothing to move
    _returns_to_assign(body)
    body.append(ast.Return(value=_name(_RET)))
    return body


def _returns_to_assign(stmts: list[ast.stmt]) -> None:
    """The branches' final returns as ``_jst_ret = value``; a branch that falls off the end
    of the function returns None."""
    if not stmts:
        stmts.append(_assign(_RET, ast.Constant(None)))
        return
    last = stmts[-1]
    if isinstance(last, ast.Return):
        stmts[-1] = ast.copy_location(
            _assign(_RET, last.value or ast.Constant(None)), last)
    elif isinstance(last, ast.If):
        _returns_to_assign(last.body)
        _returns_to_assign(last.orelse)
    elif not isinstance(last, ast.Raise):
        stmts.append(_assign(_RET, ast.Constant(None)))
    for stmt in stmts[:-1]:
        if any(isinstance(n, ast.Return) for n in _own_nodes([stmt])):
            line = next(n.lineno for n in _own_nodes([stmt]) if isinstance(n, ast.Return))
            raise TranslationError(f"the return at line {line} is followed by code on the same "
                                   "path; @declarative translates returns that end a branch")


# -- the transformer ----------------------------------------------------------------------------
def _name(id: str, ctx: ast.expr_context | None = None) -> ast.Name:
    return ast.Name(id=id, ctx=ctx or ast.Load())


def _assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[_name(target, ast.Store())], value=value)


def _runtime(fn: str, *args: ast.expr, **kwargs: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=_name(RUNTIME), attr=fn, ctx=ast.Load()),
                    args=list(args), keywords=[ast.keyword(arg=k, value=v)
                                               for k, v in kwargs.items()])


def _lambda(body: ast.expr) -> ast.Lambda:
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                         defaults=[]), body=body)


def _assigned(stmts: list[ast.stmt]) -> tuple[list[str], list[str]]:
    """The names ``stmts`` assign (sorted) and the attributes/items they assign (as text).

    The functions generated for inner statements pass their names out by assignment, so the
    names come from this level; the attribute and item stores from the inner ones too."""
    names: set[str] = set()
    for node in _own_nodes(stmts):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                not node.name.startswith(_FN)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    stores = set()
    for node in _own_nodes(stmts, into_generated=True):
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            changed, shown = node, ast.unparse(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr in _MUTATORS):
            changed, shown = node.func, f"{ast.unparse(node.func)}(...)"
        else:
            continue
        if _root(changed) not in names:  # (an object made inside the statement is its own)
            stores.add(shown)
    return sorted(names), sorted(stores)


def _root(node: ast.expr) -> str | None:
    """The name an attribute/item chain starts from (``a`` of ``a.b[1].c``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def function_def(name: str, params: list[str], body: list[ast.stmt],
                 returns: ast.expr) -> ast.FunctionDef:
    """``def name(*params): body; return returns``, as a node."""
    args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], kwonlyargs=[],
                         kw_defaults=[], defaults=[])
    fdef = ast.FunctionDef(name=name, args=args, body=[*body, ast.Return(value=returns)],
                           decorator_list=[], returns=None)
    if "type_params" in ast.FunctionDef._fields:  # Python 3.12
        fdef.type_params = []
    return fdef


def _tuple(names: list[str], ctx: ast.expr_context | None = None) -> ast.Tuple:
    return ast.Tuple(elts=[_name(n, ctx) for n in names], ctx=ctx or ast.Load())


def _appended(stmts: list[ast.stmt]) -> list[str]:
    """The local lists that ``stmts`` grow with ``name.append(x)`` (already rewritten as
    ``name = convert_append(name, x)``), in the statements nested in them too."""
    return sorted({node.targets[0].id for node in _own_nodes(stmts, into_generated=True)
                   if isinstance(node, ast.Assign) and len(node.targets) == 1
                   and isinstance(node.targets[0], ast.Name)
                   and isinstance(node.value, ast.Call)
                   and isinstance(node.value.func, ast.Attribute)
                   and node.value.func.attr == "convert_append"
                   and isinstance(node.value.func.value, ast.Name)
                   and node.value.func.value.id == RUNTIME})


def _constants(items: list[str]) -> ast.Tuple:
    return ast.Tuple(elts=[ast.Constant(i) for i in items], ctx=ast.Load())


def _current(names: list[str]) -> ast.Tuple:
    """The values the generated functions start from: ``load_name(locals(), n)`` each."""
    scope = ast.Call(func=_name("locals"), args=[], keywords=[])
    return ast.Tuple(elts=[_runtime("load_name", scope, ast.Constant(n)) for n in names],
                     ctx=ast.Load())


class _Transformer(ast.NodeTransformer):
    """Rewrites one function's body (bottom-up: inner statements first)."""

    def __init__(self, fdef: ast.FunctionDef, file: str) -> None:
        self._count = itertools.count()
        self._first_arg = fdef.args.args[0].arg if fdef.args.args else None
        self._file = file
        # for the liveness of an if's variables: every name the function reads, and for each
        # statement the reads of the outermost loop around it (read again on the next pass)
        self._loads = [n for n in ast.walk(fdef)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
        self._loop_of: dict[int, frozenset[int]] = {}
        self._map_loops(fdef.body, frozenset())
        # the function's own names: only these may be rebound by a rewritten append
        args = fdef.args
        self._locals = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs,
                                        *filter(None, (args.vararg, args.kwarg)))}
        self._locals |= {n.id for n in ast.walk(fdef)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    def _map_loops(self, stmts: list[ast.stmt], outer: frozenset[int]) -> None:
        for stmt in stmts:
            loop = outer
            if isinstance(stmt, (ast.For, ast.While)) and not outer:
                loop = frozenset(id(n) for n in ast.walk(stmt) if isinstance(n, ast.Name))
            self._loop_of[id(stmt)] = loop
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    self._map_loops([child], loop)
                elif isinstance(child, ast.excepthandler):
                    self._map_loops(child.body, loop)

    def _live(self, node: ast.If) -> set[str] | None:
        """The names that may be read after ``node`` runs: read after it in the function, or
        anywhere else in the loop around it; None when that cannot be told (all may be)."""
        if not hasattr(node, "lineno"):
            return None
        inside = {id(n) for n in ast.walk(node)}
        loop = self._loop_of.get(id(node), frozenset())
        start = (node.lineno, node.col_offset)
        return {n.id for n in self._loads if id(n) not in inside and (
            id(n) in loop or (getattr(n, "lineno", 1 << 30), getattr(n, "col_offset", 0)) > start)}

    def _where(self, node: ast.AST) -> ast.Constant:
        return ast.Constant(f"{self._file}:{node.lineno}")

    # -- expressions
    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        fn = "convert_logical_and" if isinstance(node.op, ast.And) else "convert_logical_or"
        result = node.values[-1]
        for value in reversed(node.values[:-1]):
            result = _runtime(fn, _lambda(value), _lambda(result))
        return ast.copy_location(result, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(_runtime("convert_logical_not", node.operand), node)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        fns = {ast.Eq: "convert_equal", ast.NotEq: "convert_not_equal"}
        if len(node.ops) == 1:
            fn = fns.get(type(node.ops[0]))
            if fn:
                return ast.copy_location(_runtime(fn, node.left, node.comparators[0]), node)
            return node
        # a < b < c: each pair, joined by and (a Variable has no truth value to chain on)
        if not all(isinstance(e, (ast.Name, ast.Constant, ast.Attribute))
                   for e in node.comparators[:-1]):
            return node
        lefts = [node.left, *node.comparators[:-1]]
        pairs = [ast.Compare(left=left, ops=[op], comparators=[right])
                 for left, op, right in zip(lefts, node.ops, node.comparators, strict=True)]
        return self.visit_BoolOp(ast.copy_location(ast.BoolOp(op=ast.And(), values=pairs), node))

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "print":
                node.func = ast.Attribute(value=_name(RUNTIME), attr="convert_print",
                                          ctx=ast.Load())
                return node
            if func.id == "len" and len(node.args) == 1 and not node.keywords:
                return ast.copy_location(_runtime("convert_len", node.args[0]), node)
            if func.id == "super" and not node.args and self._first_arg:
                # the recompiled function has no __class__ cell: name the class (from the
                # original's closure) and the instance
                node.args = [_name("__class__"), _name(self._first_arg)]
                return node
            if func.id in _PLAIN_CALLS:
                return node
        if isinstance(func, ast.Attribute) and func.attr == "numpy" and not node.args and (
                not node.keywords):  # x.numpy(): the values, which a program has as x
            return ast.copy_location(_runtime("convert_numpy", func.value), node)
        if isinstance(func, ast.Attribute) and (func.attr in _MUTATORS or (
                isinstance(func.value, ast.Name) and func.value.id == RUNTIME)):
            return node  # a container's own method (seen by _assigned), or the runtime
        node.func = _runtime("convert_call", func)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        return ast.copy_location(_runtime("convert_ifexp", node.test, _lambda(node.body),
                                          _lambda(node.orelse), self._where(node)), node)

    # -- statements
    def visit_Expr(self, node: ast.Expr) -> ast.stmt:
        """``name.append(x)`` of a local list: ``name = convert_append(name, x)``, so that a
        loop on program values carries the list (as a tensor array, Fluid 1.8's
        ListTransformer) and a branch on them sees it change."""
        self.generic_visit(node)
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "append" and isinstance(call.func.value, ast.Name)
                and call.func.value.id in self._locals and len(call.args) == 1
                and not call.keywords and not isinstance(call.args[0], ast.Starred)):
            name = call.func.value.id
            return ast.copy_location(ast.Assign(
                targets=[_name(name, ast.Store())],
                value=_runtime("convert_append", _name(name), call.args[0])), node)
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        self.generic_visit(node)
        message = _lambda(node.msg) if node.msg is not None else ast.Constant(None)
        call = _runtime("convert_assert", node.test, message, self._where(node))
        return ast.copy_location(ast.Expr(value=call), node)

    def visit_Return(self, node: ast.Return) -> ast.Return:
        self.generic_visit(node)
        if node.value is not None:
            node.value = _runtime("checked_return", node.value)
        return node

    def visit_If(self, node: ast.If) -> list[ast.stmt]:
        self.generic_visit(node)
        k = next(self._count)
        names, stores = _assigned(node.body + node.orelse)
        true_fn, false_fn = f"{_FN}_true_{k}", f"{_FN}_false_{k}"
        defs = [function_def(true_fn, names, node.body, _tuple(names)),
                function_def(false_fn, names, node.orelse or [ast.Pass()], _tuple(names))]
        live = self._live(node)
        call = _runtime("convert_ifelse", node.test, _name(true_fn), _name(false_fn),
                        _current(names), _constants(names), self._where(node),
                        _constants(stores),
                        _constants([n for n in names if live is None or n in live]),
                        _constants(_appended(node.body + node.orelse)))
        if names:
            result: ast.stmt = ast.Assign(targets=[_tuple(names, ast.Store())], value=call)
        else:
            result = ast.Expr(value=call)
        return [ast.copy_location(s, node) for s in (*defs, result)]

    def visit_While(self, node: ast.While) -> list[ast.stmt]:
        if node.orelse:
            raise TranslationError(f"while ... else (line {node.lineno}) is not translated by "
                                   "@declarative")
        setup, node.body, node.test, _ = self._flags(node.body, node.test, node)
        self.generic_visit(node)
        return [*setup, *self._loop(node.test, node.body, node)]

    def visit_For(self, node: ast.For) -> list[ast.stmt]:
        """``for target in range(...)``: a ``while`` on a counter, which becomes a program loop
        when the bounds are Variables; ``for target in items``: the same over the indices of
        ``list(items)``, a Python loop (it runs while the program is built)."""
        if node.orelse:
            raise TranslationError(f"for ... else (line {node.lineno}) is not translated by "
                                   "@declarative")
        k = next(self._count)
        counter, stop, step = f"{_IDX}_{k}", f"{_IDX}_stop_{k}", f"{_IDX}_step_{k}"
        it = node.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and not it.keywords and 1 <= len(it.args) <= 3):
            args = it.args
            setup = [_assign(counter, args[0] if len(args) > 1 else ast.Constant(0)),
                     _assign(stop, args[1] if len(args) > 1 else args[0]),
                     _assign(step, args[2] if len(args) > 2 else ast.Constant(1))]
            item: ast.expr = _name(counter)
        else:
            items = f"{_IDX}_items_{k}"
            setup = [_assign(items, _runtime("as_sequence", it)), _assign(counter, ast.Constant(0)),
                     _assign(stop, _runtime("convert_len", _name(items))),
                     _assign(step, ast.Constant(1))]
            item = ast.Subscript(value=_name(items), slice=_name(counter), ctx=ast.Load())
        test = _runtime("range_condition", _name(counter), _name(stop), _name(step))
        body = [ast.Assign(targets=[node.target], value=item), *node.body]
        flags, body, test, breaks = self._flags(body, test, node)
        increment: ast.stmt = ast.AugAssign(target=_name(counter, ast.Store()), op=ast.Add(),
                                            value=_name(step))
        if breaks:  # Python's loop variable stays where the break left it
            increment = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=_name(breaks)),
                               body=[increment], orelse=[])
        loop = ast.copy_location(ast.While(test=test, body=[*body, increment], orelse=[]), node)
        for stmt in (*setup, *flags):
            ast.copy_location(stmt, node)
        ast.fix_missing_locations(loop)
        self.generic_visit(loop)
        for stmt in setup:
            self.visit(stmt)
        return [*setup, *flags, *self._loop(loop.test, loop.body, node)]

    def _loop(self, test: ast.expr, body: list[ast.stmt], node: ast.stmt) -> list[ast.stmt]:
        k = next(self._count)
        names, stores = _assigned(body)
        cond_fn, body_fn = f"{_FN}_cond_{k}", f"{_FN}_body_{k}"
        defs = [function_def(cond_fn, names, [], test), function_def(body_fn, names, body,
                                                                _tuple(names))]
        call = _runtime("convert_while_loop", _name(cond_fn), _name(body_fn), _current(names),
                        _constants(names), self._where(node), _constants(stores))
        result = (ast.Assign(targets=[_tuple(names, ast.Store())], value=call) if names
                  else ast.Expr(value=call))
        return [ast.copy_location(s, node) for s in (*defs, result)]

    # -- break and continue
    def _flags(self, body: list[ast.stmt], test: ast.expr,
               node: ast.stmt) -> tuple[list[ast.stmt], list[ast.stmt], ast.expr, str | None]:
        """The loop's ``break``/``continue`` as flags: the statements that set them up, the
        new body, the new condition, and the break flag's name (None without a break)."""
        found = {type(n) for n in _loop_own(body)} & {ast.Break, ast.Continue}
        if not found:
            return [], body, test, None
        k = next(self._count)
        brk, cont = f"{_BRK}_{k}", f"{_CONT}_{k}"
        setup = [_assign(brk, ast.Constant(False)), _assign(cont, ast.Constant(False))]
        body = [_assign(cont, ast.Constant(False)), *_guarded(body, brk, cont)]
        loop = self._loop_of.get(id(node), frozenset())
        for guard in _loop_own(body):  # the ifs _guarded made: read again on the next pass
            if isinstance(guard, ast.If) and id(guard) not in self._loop_of:
                self._loop_of[id(guard)] = loop
        if ast.Break in found:
            test = ast.BoolOp(op=ast.And(), values=[
                ast.UnaryOp(op=ast.Not(), operand=_name(brk)), test])
        for stmt in setup:
            ast.copy_location(stmt, node)
        return setup, body, test, brk if ast.Break in found else None


def _loop_own(stmts: list[ast.stmt]) -> Any:
    """The nodes of a loop body outside its nested loops and functions (their break and
    continue are theirs)."""
    return _walk(stmts, lambda child: not isinstance(child, (
        ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))


def _guarded(stmts: list[ast.stmt], brk: str, cont: str) -> list[ast.stmt]:
    """``stmts`` with ``break``/``continue`` setting the flags, and every statement after one
    that may set them run only when neither is set."""
    out: list[ast.stmt] = []
    for i, stmt in enumerate(stmts):
        if isinstance(stmt, ast.Break):
            out.append(ast.copy_location(_assign(brk, ast.Constant(True)), stmt))
            return out
        if isinstance(stmt, ast.Continue):
            out.append(ast.copy_location(_assign(cont, ast.Constant(True)), stmt))
            return out
        jumps = any(isinstance(n, (ast.Break, ast.Continue)) for n in _loop_own([stmt]))
        if isinstance(stmt, ast.If):
            stmt.body = _guarded(stmt.body, brk, cont)
            stmt.orelse = _guarded(stmt.orelse, brk, cont)
        elif isinstance(stmt, (ast.With, ast.Try)) and jumps:
            raise TranslationError(f"break/continue inside a {type(stmt).__name__.lower()} "
                                   f"statement (line {stmt.lineno}) is not translated by "
                                   "@declarative")
        out.append(stmt)
        rest = stmts[i + 1:]
        if rest and jumps:
            neither = ast.UnaryOp(op=ast.Not(), operand=ast.BoolOp(
                op=ast.Or(), values=[_name(brk), _name(cont)]))
            out.append(ast.copy_location(
                ast.If(test=neither, body=_guarded(rest, brk, cont), orelse=[]), stmt))
            return out
    return out
