"""The Python twins of the CLI verbs: gather inputs at the edges, call estimate/, return
frozen results. Exposed as mlxfit.fit, mlxfit.matrix, ... (see mlxfit/__init__.py)."""
