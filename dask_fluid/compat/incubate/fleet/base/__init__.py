"""``paddle.fluid.incubate.fleet.base``: ``role_maker``."""
