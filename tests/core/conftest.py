import pytest

import dask_fluid as fluid


@pytest.fixture(autouse=True)
def fresh_names():
    """Every test builds programs whose names start at fc_0."""
    with fluid.unique_name.guard():
        yield
