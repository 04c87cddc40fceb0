import pytest

from dask_fluid.compat.dataset import common


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    """Paddle's dataset cache (``DATA_HOME``) in the test's own directory."""
    monkeypatch.setattr(common, "DATA_HOME", str(tmp_path))
    return str(tmp_path)
