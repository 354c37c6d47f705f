"""`mlxfit cluster`: a model across several Macs (pipeline or tensor parallel)."""
