"""Test isolation: no test reaches the network or writes to the real caches by default.

The Hub tests point HF_ENDPOINT at their own 127.0.0.1 server and undo HF_HUB_OFFLINE.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path_factory.mktemp("mlxfit-cache")))
