"""The error hierarchy. The CLI turns any MlxfitError into one line and exit code 2."""

from __future__ import annotations


class MlxfitError(Exception):
    """Bad input we can name: the message is one line a user can act on."""


class ConfigError(MlxfitError):
    """config.json is missing, garbled, or describes no model we can size."""


class WeightsError(MlxfitError):
    """A safetensors file is missing, truncated, hostile, or not safetensors at all."""


class SourceError(MlxfitError):
    """The model cannot be found: no folder, not in the cache, not in the catalog."""


class MachineError(MlxfitError):
    """The machine cannot be resolved: unknown --machine, bad budget."""


class UsageError(MlxfitError):
    """A flag value out of range (--ctx 0, negative sizes)."""
