"""``paddle.fluid.incubate``: the fleet role makers and the (not implemented) collective fleet."""
