"""Apple Silicon machines: the SKU table, --machine strings and usable memory, the probe."""
