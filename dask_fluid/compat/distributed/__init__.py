"""``paddle.distributed``: Paddle 1.8's process launcher, :mod:`.launch`
(``dask-fluid run -m paddle.distributed.launch ... train.py``)."""
