"""``paddle.fluid.incubate.fleet``: ``base.role_maker`` and ``collective``."""
