"""``paddle.fluid.incubate.fleet.parameter_server``: Fluid 1.8's parameter-server fleet (the
transpiler flavour, ``distribute_transpiler``)."""
