"""The calibration constants: their types (constants) and where they are loaded from (load)."""
