"""Every byte read about a model, from disk or the network: folder, HF cache, catalog, Hub."""
