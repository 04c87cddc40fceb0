"""LayerHelper: what every layer uses to name, create and initialise its variables."""

from __future__ import annotations

import copy
import math
from typing import Any

from . import unique_name
from .framework import (
    Parameter,
    Variable,
    default_main_program,
    default_startup_program,
    in_dygraph_mode,
    variable_list,
)
from .initializer import ConstantInitializer, Initializer, XavierInitializer
from .param_attr import ParamAttr, WeightNormParamAttr

#: the ``act=`` a layer takes (each is an op of the same name)
ACTIVATIONS = ("relu", "sigmoid", "tanh", "softmax", "exp", "sqrt", "abs", "square",
               "leaky_relu", "relu6", "elu", "softplus", "softsign", "hard_sigmoid", "swish",
               "gelu", "log")


_FROM_KWARGS: Any = object()  # append_activation(x): the act given to the constructor


class LayerHelper:
    """Names a layer instance (``fc_0``) and creates its parameters and temporaries.

    Fluid 1.8's ``LayerHelper(layer_type, **kwargs)`` too, as custom layers call it
    (``LayerHelper("my_layer", **locals())``): the keyword arguments are kept in
    :attr:`kwargs`, and :meth:`input`, :attr:`param_attr`, :attr:`bias_attr`,
    :meth:`input_dtype`, :meth:`append_bias_op` and :meth:`append_activation` read the layer's
    ``input``, ``param_attr``, ``bias_attr`` and ``act`` from them.
    """

    def __init__(self, layer_type: str, name: str | None = None, **kwargs: Any) -> None:
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)
        self.kwargs = {**kwargs, "name": self.name}

    @property
    def main_program(self):
        return default_main_program()

    @property
    def startup_program(self):
        return default_startup_program()

    def create_parameter(
        self,
        attr: ParamAttr,
        shape: list[int],
        dtype: str = "float32",
        is_bias: bool = False,
        default_initializer: Initializer | None = None,
    ) -> Parameter | Variable:
        """Create the parameter in the main program and its init op in the startup program.

        With a :class:`WeightNormParamAttr` (Fluid 1.8's ``LayerHelperBase.create_parameter``)
        the result is not a parameter but the weight ``g * v / ||v||`` computed in the main
        program from the parameters ``<name>_g`` and ``<name>_v``; see
        :meth:`_create_weight_normalize`.
        """
        if not isinstance(attr, ParamAttr):  # a list of attrs where the layer takes one
            raise TypeError(f"{self.name}: this parameter takes one ParamAttr, got "
                            f"{type(attr).__name__} {attr!r}")
        suffix = "b" if is_bias else "w"
        name = attr.name or unique_name.generate(f"{self.name}.{suffix}")
        init = attr.initializer or default_initializer or (
            ConstantInitializer(0.0) if is_bias else XavierInitializer())
        if isinstance(attr, WeightNormParamAttr):
            if in_dygraph_mode():  # as Fluid 1.8's LayerHelperBase
                raise NotImplementedError("WeightNormParamAttr is not supported in dygraph "
                                          "mode: use it in a static program")
            w = self._create_weight_normalize(attr, name, list(shape), dtype, init)
            WeightNormParamAttr.params_with_weight_norm.append(w)
            return w
        param = self.main_program.global_block().create_parameter(
            name, shape, dtype=dtype, trainable=attr.trainable, regularizer=attr.regularizer,
            gradient_clip_attr=attr.gradient_clip,
            optimize_attr={"learning_rate": attr.learning_rate},
            do_model_average=attr.do_model_average)
        self.set_variable_initializer(param, init)
        return param

    def _create_weight_normalize(self, attr: WeightNormParamAttr, name: str, shape: list[int],
                                 dtype: str, init: Initializer) -> Variable:
        """Fluid 1.8's ``LayerHelperBase._create_weight_normalize``: parameters ``<name>_g``
        and ``<name>_v`` and the weight ``w = g * v / ||v||_{all dims but dim}``.

        The startup program initialises ``v`` with ``init`` and then sets ``g`` to ``v``'s
        norm (ops ``abs``, ``pow``, ``reduce_sum``, ``pow``, ``reshape2``, with ``transpose``
        for a middle ``dim``), so ``w`` starts equal to ``v``; the main program computes the
        same norm of ``v`` with the same ops and ``w`` with ``elementwise_div``, ``reshape2``
        and ``elementwise_mul``, so gradients reach ``g`` and ``v`` through them.
        """
        rank = len(shape)
        dim = attr.dim
        if dim is not None and not 0 <= dim < rank:
            # Fluid indexes shape[dim] (and builds a transpose perm from it): a negative or
            # too-large dim has no meaning there
            raise ValueError(f"WeightNormParamAttr: dim must be None or in [0, {rank}) for a "
                             f"parameter of shape {shape}, got {dim}")

        def tmp(block: Any, key: str, tshape: list[int] | None) -> Variable:
            return block.create_var(name=unique_name.generate(f"{self.name}.{key}"),
                                    shape=tshape, dtype=dtype, persistable=False)

        def norm_op(block: Any, x: Variable, xshape: list[int], out: Variable | None,
                    dims: list[int] | None) -> Variable:
            # ||x||_2 over ``dims`` (all when None) as Fluid writes it: (sum |x|^2)^(1/2)
            kept = [] if dims is None else [d for i, d in enumerate(xshape) if i not in dims]
            out_shape = kept or [1]
            if out is None:
                out = tmp(block, "weight_norm_norm", out_shape)
            abs_out = tmp(block, "weight_norm_abs", xshape)
            block.append_op("abs", inputs={"X": [x]}, outputs={"Out": [abs_out]})
            pow_out = tmp(block, "weight_norm_pow", xshape)
            block.append_op("pow", inputs={"X": [abs_out]}, outputs={"Out": [pow_out]},
                            attrs={"factor": 2.0})
            sum_out = tmp(block, "weight_norm_sum", out_shape)
            # Fluid passes dim=None with reduce_all; a None attr is dropped, leaving the default
            block.append_op("reduce_sum", inputs={"X": [pow_out]}, outputs={"Out": [sum_out]},
                            attrs={"keep_dim": False, "reduce_all": dims is None,
                                   **({} if dims is None else {"dim": list(dims)})})
            block.append_op("pow", inputs={"X": [sum_out]}, outputs={"Out": [out]},
                            attrs={"factor": 0.5})
            return out

        def reshape_op(block: Any, x: Variable, new_shape: list[int],
                       out: Variable | None = None) -> Variable:
            if out is None:
                out = tmp(block, "weight_norm_reshape", list(new_shape))
            # Fluid names every XShape here "Xshape" (one shared variable); reshape2_grad
            # reads XShape for the input's shape, so each reshape gets its own here
            xs = block.create_var(name=unique_name.generate(f"{self.name}.weight_norm_xshape"),
                                  dtype=dtype, stop_gradient=True)
            block.append_op("reshape2", inputs={"X": [x]}, outputs={"Out": [out], "XShape": [xs]},
                            attrs={"shape": list(new_shape)})
            return out

        def transpose_op(block: Any, x: Variable, perm: list[int],
                         out: Variable | None = None) -> Variable:
            if out is None:
                out = tmp(block, "weight_norm_transpose", [x.shape[p] for p in perm])
            block.append_op("transpose", inputs={"X": [x]}, outputs={"Out": [out]},
                            attrs={"axis": list(perm)})
            return out

        def norm_except_dim(block: Any, x: Variable, out: Variable | None) -> Variable:
            """The norm of ``x`` over all its dims but ``dim``, shaped like ``g``."""
            xs = list(shape)
            if out is None:
                out = tmp(block, "weight_norm_norm", g_shape)
            if dim is None:
                norm_op(block, x, xs, out, None)
                return out
            n = xs[dim]
            rest = math.prod(xs) // n  # the reshape's -1, for the declared shapes
            if dim == 0:
                flat = reshape_op(block, x, [n, -1])
                flat.shape = (n, rest)
                norm = norm_op(block, flat, [n, rest], None, [1])
                reshape_op(block, norm, [n] + [1] * (rank - 1), out)
            elif dim == rank - 1:
                flat = reshape_op(block, x, [-1, n])
                flat.shape = (rest, n)
                norm = norm_op(block, flat, [rest, n], None, [0])
                reshape_op(block, norm, [1] * (rank - 1) + [n], out)
            else:
                perm = list(range(rank))
                perm[0], perm[dim] = dim, 0
                moved = transpose_op(block, x, perm)
                flat = reshape_op(block, moved, [n, -1])
                flat.shape = (n, rest)
                norm = norm_op(block, flat, [n, rest], None, [1])
                back = reshape_op(block, norm, [n] + [1] * (rank - 1))
                transpose_op(block, back, perm, out)
            return out

        g_shape = [1] * rank
        if dim is not None:
            g_shape[dim] = shape[dim]
        kwargs = dict(trainable=attr.trainable, regularizer=attr.regularizer,
                      gradient_clip_attr=attr.gradient_clip,
                      optimize_attr={"learning_rate": attr.learning_rate},
                      do_model_average=attr.do_model_average)
        g_name, v_name = f"{name}_g", f"{name}_v"

        # startup: v from the initializer (prepended, so it runs first), then g = ||v||, so
        # that w = g v / ||v|| starts as the initializer would have made it
        sblock = self.startup_program.global_block()
        if not sblock.has_var(v_name):
            sv = sblock.create_var(name=v_name, shape=shape, dtype=dtype, persistable=True)
            init(sv, sblock)
            sg = sblock.create_var(name=g_name, shape=g_shape, dtype=dtype, persistable=True)
            norm_except_dim(sblock, sv, sg)
            reshape_op(sblock, sg, g_shape, sg)  # the norm has no unit dims for dim=None

        gblock = self.main_program.global_block()
        g = gblock.create_parameter(g_name, g_shape, dtype=dtype, **kwargs)
        v = gblock.create_parameter(v_name, shape, dtype=dtype, **kwargs)
        block = self.main_program.current_block()
        norm = norm_except_dim(block, v, None)
        # the ops layers.elementwise_div, reshape and elementwise_mul append (this module is
        # below layers): g and the norm have the same shape; elementwise_mul broadcasts a Y
        # whose dims are a run of X's, so the scale is squeezed to [n]
        scale = tmp(block, "weight_norm_scale", g_shape)
        block.append_op("elementwise_div", inputs={"X": [g], "Y": [norm]},
                        outputs={"Out": [scale]}, attrs={"axis": -1})
        y = scale if dim is None else reshape_op(block, scale, [shape[dim]])
        w = tmp(block, "weight_norm_w", shape)
        block.append_op("elementwise_mul", inputs={"X": [v], "Y": [y]}, outputs={"Out": [w]},
                        attrs={"axis": -1 if dim is None else dim})
        return w

    def set_variable_initializer(self, var: Variable, init: Initializer) -> None:
        """Declare ``var`` in the startup program and prepend its init op there (in dygraph
        mode: run the init op on ``var`` now, as Fluid's dygraph parameters are created
        initialised)."""
        if in_dygraph_mode():
            init(var, self.main_program.global_block())
            return
        block = self.startup_program.global_block()
        if block.has_var(var.name):
            return
        svar = block.create_var(name=var.name, shape=var.shape, dtype=var.dtype,
                                persistable=True)
        init(svar, block)

    def create_tmp(self, dtype: str = "float32", shape: Any = None,
                   stop_gradient: bool = False) -> Variable:
        """A temporary output: ``<layer>.tmp_N`` in the current block."""
        return self.main_program.current_block().create_var(
            name=unique_name.generate(f"{self.name}.tmp"), dtype=dtype, shape=shape,
            stop_gradient=stop_gradient)

    def append_op(self, *args: Any, **kwargs: Any):
        return self.main_program.current_block().append_op(*args, **kwargs)

    def append_activation(self, x: Variable, act: str | None = _FROM_KWARGS) -> Variable:
        """``x`` through the activation op ``act`` (None: ``x`` itself; not given: the ``act``
        the helper was made with), as Fluid's ``LayerHelper.append_activation``."""
        if act is _FROM_KWARGS:
            act = self.kwargs.get("act")
        if act is None:
            return x
        if not isinstance(act, str):
            raise TypeError(f"{act!r} should be unicode or str (the activation's op type)")
        if act not in ACTIVATIONS:
            raise ValueError(f"unknown activation {act!r}; use one of {ACTIVATIONS} or None")
        out = self.create_tmp(dtype=x.dtype, shape=x.shape)
        self.append_op(act, inputs={"X": [x]}, outputs={"Out": [out]})
        return out

    # -- Fluid 1.8's LayerHelper API for custom layers ---------------------------------------
    def create_variable_for_type_inference(self, dtype: Any,
                                           stop_gradient: bool = False) -> Variable:
        """A temporary output of ``dtype`` whose shape the op gives (Fluid's name for
        :meth:`create_tmp`)."""
        return self.create_tmp(dtype=dtype, stop_gradient=stop_gradient)

    def create_variable(self, *args: Any, **kwargs: Any) -> Variable:
        """A variable of the current block (``Block.create_var``'s arguments)."""
        return self.main_program.current_block().create_var(*args, **kwargs)

    def create_global_variable(self, persistable: bool = False, *args: Any,
                               **kwargs: Any) -> Variable:
        """A variable of the main program's global block."""
        return self.main_program.global_block().create_var(*args, persistable=persistable,
                                                           **kwargs)

    def multiple_input(self, input_param_name: str = "input") -> list[Variable]:
        """The layer's ``input_param_name`` argument as a list of Variables."""
        return variable_list(self.kwargs.get(input_param_name, []),
                             f"{self.layer_type}: {input_param_name}")

    def input(self, input_param_name: str = "input") -> Variable:
        """The layer's one ``input_param_name`` Variable."""
        inputs = self.multiple_input(input_param_name)
        if len(inputs) != 1:
            raise ValueError(f"{self.layer_type} layer only takes one input, got "
                             f"{len(inputs)}")
        return inputs[0]

    def input_dtype(self, input_param_name: str = "input") -> Any:
        """The dtype of the layer's inputs, which must agree."""
        dtypes = {x.dtype for x in self.multiple_input(input_param_name)}
        if len(dtypes) > 1:
            raise ValueError(f"{self.layer_type}: the inputs' dtypes differ: {sorted(dtypes)}")
        return dtypes.pop() if dtypes else None

    @property
    def param_attr(self) -> Any:
        """The layer's ``param_attr`` argument as a ParamAttr (or a list of them)."""
        return ParamAttr._to_attr(self.kwargs.get("param_attr"))

    @property
    def bias_attr(self) -> Any:
        """The layer's ``bias_attr`` argument as a ParamAttr, or False (no bias)."""
        return ParamAttr._to_attr(self.kwargs.get("bias_attr"))

    def multiple_param_attr(self, length: int) -> list[ParamAttr]:
        """``length`` ParamAttrs: the ``param_attr`` list, or copies of the one given."""
        attrs = self.param_attr
        attrs = [attrs] if isinstance(attrs, ParamAttr) else list(attrs)
        if len(attrs) == 1 and length != 1:
            attrs = [copy.deepcopy(attrs[0]) for _ in range(length)]
        if len(attrs) != length:
            raise ValueError(f"{self.layer_type}: {len(attrs)} param_attrs for {length} "
                             "inputs")
        return attrs

    def iter_inputs_and_params(self, input_param_name: str = "input"):
        """Each input with its ParamAttr."""
        inputs = self.multiple_input(input_param_name)
        yield from zip(inputs, self.multiple_param_attr(len(inputs)), strict=True)

    def get_parameter(self, name: str) -> Parameter:
        """The parameter ``name`` of the main program."""
        param = self.main_program.global_block().var(name)
        if not isinstance(param, Parameter):
            raise ValueError(f"no Parameter name {name} found")
        return param

    def append_bias_op(self, input_var: Variable, dim_start: int = 1,
                       dim_end: int | None = None) -> Variable:
        """``input_var`` plus a bias of its dims ``[dim_start:dim_end]`` (none when the
        layer's ``bias_attr`` is False)."""
        bias_attr = self.bias_attr
        if not bias_attr:
            return input_var
        if input_var.shape is None:
            raise ValueError(f"{self.layer_type}: the shape of {input_var.name!r} is unknown "
                             "(dask_fluid does not infer the shapes of ops appended by hand): "
                             "create it with a shape (create_variable(shape=...))")
        b = self.create_parameter(bias_attr, list(input_var.shape[dim_start:dim_end]),
                                  input_var.dtype, is_bias=True)
        out = self.create_tmp(dtype=input_var.dtype, shape=input_var.shape)
        self.append_op("elementwise_add", inputs={"X": [input_var], "Y": [b]},
                       outputs={"Out": [out]}, attrs={"axis": dim_start})
        return out
