"""The error hierarchy. The CLI turns any MlxfitError into one line and exit code 2.

    MlxfitError                 bad input we can name, in one line
    ├── ConfigError             config.json missing, garbled, or no model we can size
    ├── WeightsError            a safetensors file missing, truncated or hostile
    ├── SourceError             the model cannot be found or read
    │   └── HubUnreachable      the Hub could not be asked (a cached copy still answers)
    ├── MachineError            the machine cannot be resolved
    ├── UsageError              a parameter out of range (names the parameter)
    ├── NoMeasurements          calibrate: no usable record to fit
    ├── MlxUnavailable          measure: mlx / mlx-lm not installed
    └── Cancelled               a Hub fetch stopped because another request failed (never shown)
"""

from __future__ import annotations


class MlxfitError(Exception):
    """Bad input we can name: the message is one line a user can act on.

    ``param`` names the parameter at fault as the Python twins call it ("ctx", "machine"),
    ``also`` the other parameters the message names; the message words them by those names. The
    CLI words each as its flag (--ctx, --machine): mlxfit.cli.common.error_text. ``file`` is
    the file at fault and ``field`` the key in it (config.json's 'hidden_size'), where known:
    what `--json` reports as error.file and error.field."""

    def __init__(self, message: str = "", *, param: str | None = None,
                 also: tuple[str, ...] = (), file: str | None = None,
                 field: str | None = None):
        super().__init__(message)
        self.param = param
        self.also = tuple(also)
        self.file = file
        self.field = field

    @property
    def params(self) -> tuple[str, ...]:
        """Every parameter the message names, the one at fault first."""
        return ((self.param,) if self.param else ()) + self.also


class ConfigError(MlxfitError):
    """config.json is missing, garbled, or describes no model we can size."""


class WeightsError(MlxfitError):
    """A safetensors file is missing, truncated, hostile, or not safetensors at all."""


class SourceError(MlxfitError):
    """The model cannot be found: no folder, not in the cache, not in the catalog."""


class MachineError(MlxfitError):
    """The machine cannot be resolved: unknown --machine, bad budget."""


class UsageError(MlxfitError):
    """A parameter value out of range (ctx 0, negative sizes); ``param`` names it."""


class HubUnreachable(SourceError):
    """The Hub could not be asked (network, timeouts, 429/5xx after retries): a cached copy,
    even an old one, is still a good answer."""


class NoMeasurements(MlxfitError):
    """No usable record to fit."""


class MlxUnavailable(MlxfitError):
    """mlx or mlx-lm cannot be imported: the measure extra is not installed."""


class Cancelled(MlxfitError):
    """Another request of the same fetch failed: stop quietly (never shown)."""
