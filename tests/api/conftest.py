import pytest

import tfc
from tfc.api import lowered_cache


@pytest.fixture(autouse=True)
def fresh_graph():
    """Each test builds in its own default graph."""
    with tfc.Graph().as_default() as g:
        yield g


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty compile cache on disk and in this process."""
    monkeypatch.setenv("TFC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(lowered_cache, "_IN_PROCESS", type(lowered_cache._IN_PROCESS)())
    return tmp_path
