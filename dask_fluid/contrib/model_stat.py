"""``fluid.contrib.model_stat`` (Fluid 1.8): :func:`summary`, a table of each op's parameters
and FLOPs, computed as python/paddle/fluid/contrib/model_stat.py computes them.

Fluid prints the table with ``prettytable``; dask_fluid does not depend on it and formats the
same table (``align = 'r'``, PrettyTable's default borders) itself.
"""

from __future__ import annotations

from typing import Any

from ..framework import Block, Operator, Program, Variable

__all__: list[str] = []

_HEADER = ("No.", "TYPE", "INPUT", "OUTPUT", "PARAMs", "FLOPs")


def summary(main_prog: Program) -> None:
    """Print each supported op's input and output shape (batch dimension dropped), parameter
    count and FLOPs, then the totals, as Fluid 1.8's ``fluid.contrib.model_stat.summary``.

    The counts follow Fluid's formulas op by op, quirks included:

    - ``conv2d`` / ``depthwise_conv2d``: ``PARAMs = C_out · (kh · kw · C_in / groups + bias)``
      with ``C_in`` the filter's second dimension (so a grouped filter is divided by ``groups``
      twice) and ``bias`` 1 only when the op has a ``Bias`` input; ``FLOPs = 2 · H_out · W_out
      · PARAMs`` (a multiply and an add each).
    - ``pool2d``: no parameters; ``FLOPs = C_out · H_out · W_out · ksize[0] · ksize[1]`` with
      the op's ``ksize`` attribute as it is (a global pooling keeps the layer's ``pool_size``).
    - ``mul``: only those whose output's name contains ``'fc'`` (an ``fc`` layer's);
      ``PARAMs = in · out + 1`` (the bias counted as one), ``FLOPs = in · out``.
    - ``sigmoid``, ``tanh``, ``relu``, ``leaky_relu``, ``prelu``: ``FLOPs`` is the product of
      the input's whole shape, the batch dimension included (``-1`` makes it negative, as in
      Fluid); ``prelu`` counts 1 parameter.
    - ``batch_norm`` (4-D input): ``PARAMs = 2 · C``, ``FLOPs = 2 · C · H · W``.

    Other ops are left out. Every block is read, each op against its block's variables.

    Parameters
    ----------
    main_prog : Program
        The program to summarise.

    Returns
    -------
    None
        As Fluid, the summary is printed only.

    Raises
    ------
    TypeError
        ``main_prog`` is not a Program.
    ValueError
        A counted op's variables have shapes its formula cannot read (conv2d's filter and
        output channels differ; a batch_norm or pool2d variable is not 4-D).
    """
    if not isinstance(main_prog, Program):
        raise TypeError(f"summary: main_prog must be a Program, got {type(main_prog).__name__}")
    collected: list[dict[str, Any]] = []
    for block in main_prog.blocks:
        for op in block.ops:
            res = _summary_model(block, op)
            if res is None:
                continue
            in_shape, out_shape, params, flops = res
            collected.append({"type": op.type, "input_shape": tuple(in_shape[1:]),
                              "out_shape": tuple(out_shape[1:]), "PARAMs": params,
                              "FLOPs": flops})
    table, total = _format_summary(collected)
    _print_summary(table, total)


def _var(block: Block, name: str, op: Operator) -> Variable:
    var = block.vars.get(name)
    if var is None:  # Fluid reads the op's own block only; a sub-block op may use outer vars
        var = block._find_var_recursive(name)
    if var is None or var.shape is None:
        raise ValueError(f"summary: {op.type}'s variable {name!r} has no known shape")
    return var


def _shape(block: Block, op: Operator, slot: str, out: bool = False) -> tuple:
    names = op.output(slot) if out else op.input(slot)
    return tuple(_var(block, names[0], op).shape)


def _dims4(shape: tuple, what: str, op: Operator) -> tuple:
    if len(shape) != 4:
        raise ValueError(f"summary: {op.type}'s {what} must be 4-D to be counted, got {shape}")
    return shape


def _summary_model(block: Block, op: Operator) -> tuple | None:
    """(input shape, output shape, PARAMs, FLOPs) of one op, None for ops Fluid does not
    count; Fluid's _summary_model."""
    if op.type in ("conv2d", "depthwise_conv2d"):
        k_shape = _dims4(_shape(block, op, "Filter"), "Filter", op)
        in_shape = _shape(block, op, "Input")
        out_shape = _dims4(_shape(block, op, "Output", out=True), "Output", op)
        c_out, c_in, k_h, k_w = k_shape
        _, c_out_, h_out, w_out = out_shape
        if c_out != c_out_:
            raise ValueError(f"summary: {op.type}'s filter has {c_out} output channels but its "
                             f"output {c_out_} (shape error)")
        # true division, as Fluid (a float count, truncated when tabulated)
        kernel_ops = k_h * k_w * (c_in / op.attr("groups"))
        bias_ops = 0 if op.input("Bias") == [] else 1
        params = c_out * (kernel_ops + bias_ops)
        # after NVIDIA's paper: a multiply and an add per term
        flops = 2 * (h_out * w_out * c_out * (kernel_ops + bias_ops))
    elif op.type == "pool2d":
        in_shape = _shape(block, op, "X")
        out_shape = _dims4(_shape(block, op, "Out", out=True), "Out", op)
        _, c_out, h_out, w_out = out_shape
        k_size = op.attr("ksize")
        params = 0
        flops = h_out * w_out * c_out * (k_size[0] * k_size[1])
    elif op.type == "mul":
        k_shape = _shape(block, op, "Y")
        in_shape = _shape(block, op, "X")
        out_shape = _shape(block, op, "Out", out=True)
        # Fluid tells an fc's mul from others by its output's name
        if "fc" not in op.output("Out")[0]:
            return None
        k_in, k_out = k_shape
        params = k_in * k_out + 1  # Fluid counts the bias (added by another op) as one
        flops = k_in * k_out
    elif op.type in ("sigmoid", "tanh", "relu", "leaky_relu", "prelu"):
        in_shape = _shape(block, op, "X")
        out_shape = _shape(block, op, "Out", out=True)
        params = 1 if op.type == "prelu" else 0
        flops = 1
        for d in in_shape:
            flops *= d
    elif op.type == "batch_norm":
        in_shape = _dims4(_shape(block, op, "X"), "X", op)
        out_shape = _shape(block, op, "Y", out=True)
        _, c_in, h_out, w_out = in_shape
        params = c_in * 2  # gamma, beta
        flops = h_out * w_out * c_in * 2  # mean and std
    else:
        return None
    return in_shape, out_shape, params, flops


def _format_table(rows: list[list[Any]]) -> str:
    """PrettyTable's default rendering with every column right-aligned."""
    cells = [list(_HEADER)] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(_HEADER))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(r: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |"

    return "\n".join([rule, line(cells[0]), rule, *(line(r) for r in cells[1:]), rule])


def _format_summary(collected: list[dict[str, Any]]) -> tuple[str, dict[str, list[int]]]:
    rows, total_params, total_flops = [], [], []
    for i, op in enumerate(collected):
        rows.append([i, op["type"], op["input_shape"], op["out_shape"], int(op["PARAMs"]),
                     int(op["FLOPs"])])
        total_params.append(int(op["PARAMs"]))
        total_flops.append(int(op["FLOPs"]))
    return _format_table(rows), {"params": total_params, "flops": total_flops}


def _print_summary(table: str, total: dict[str, list[int]]) -> None:
    params, flops = sum(total["params"]), sum(total["flops"])
    print(table)
    print(f"Total PARAMs: {params}({params / 10**6:.4f}M)")
    print(f"Total FLOPs: {flops}({flops / 10**9:.2f}G)")
    print("Notice: \n now supported ops include [Conv, DepthwiseConv, FC(mul), BatchNorm, Pool, "
          "Activation(sigmoid, tanh, relu, leaky_relu, prelu)]")
