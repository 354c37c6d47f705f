"""How mlx-lm's ``make_cache()`` builds each family's caches: the builders the family table
(``mlxfit.model.families``) names, one function per cache layout (mlx_lm/models/*.py, mlx-lm
0.32), grouped by the shape of the cache: ``dense`` (a KVCache per layer), ``sliding``
(windowed caches), ``mla`` (latent attention), ``hybrid`` (recurrent / SSM / conv state beside
attention); ``renames`` maps families' own field names; ``ctx`` is what a builder reads.
Pure: every builder takes the config's fields (``Ctx``) and returns the per-layer plan;
tests/test_oracle_families.py checks each against mlx-lm's own caches.
"""
