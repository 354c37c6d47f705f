"""Per-user settings in one place: where mlxfit's files are and what the environment says,
read once per call by ``from_environ()`` (never at import: tests and long-lived processes set
variables between calls) and passed down as a frozen ``Settings`` value; the defaults every verb
shares (model, macOS version); and the one TOML reader (``read_toml``, ``deep_merge``,
``config_table``).

Where things are, and the variables that move them:

- user files (calibration.toml, apple_skus.toml, links.toml, config.toml):
  ``$XDG_CONFIG_HOME/mlxfit``, else ``~/.config/mlxfit``; absent when there is no home;
- mlxfit's cache (Hub metadata): ``$MLXFIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/mlxfit``, else
  ``~/.cache/mlxfit``;
- the measurements ``mlxfit measure --save`` appends to: ``measurements.jsonl`` in mlxfit's
  cache (by default ``~/.cache/mlxfit/measurements.jsonl``);
- the Hugging Face hub cache, as huggingface_hub finds it: ``$HF_HUB_CACHE``, else
  ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``,
  else ``~/.cache/huggingface/hub``;
- the Hub (``HubSettings``): ``HF_ENDPOINT``, ``HF_HUB_OFFLINE`` / ``TRANSFORMERS_OFFLINE``,
  ``HF_HUB_DOWNLOAD_TIMEOUT``, ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` (the token itself is
  huggingface_hub's business: HF_TOKEN or the stored login), and mlxfit's own tunables
  ``MLXFIT_HUB_<FIELD>`` (``MLXFIT_HUB_RETRIES=1``, ``MLXFIT_HUB_BACKOFF_SECONDS=0.01``...).

huggingface_hub freezes HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_CACHE in its constants when it
is first imported, so a process (or a test) that changes them would be ignored: they are read
here, on each call, with huggingface_hub's precedence.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mlxfit import resources
from mlxfit.errors import MlxfitError, UsageError
from mlxfit.localfile import read_regular, why

try:
    import pwd
except ImportError:  # pragma: no cover - not a POSIX system
    pwd = None  # type: ignore[assignment]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


# The model `mlxfit fit` sizes when none is named, and pick's default (README quick start): in
# the catalog, 4.6 GB of weights, fits every Mac from 16 GB at 8K tokens, the most downloaded
# 8B MLX conversion.
DEFAULT_MODEL = "mlx-community/Qwen3-8B-4bit"
# macOS major version assumed for the GPU working-set limit when --macos is not given.
DEFAULT_MACOS = 26
# The macOS major versions MLX runs on: MLX needs macOS 14.0 or later (its install page,
# ml-explore.github.io/mlx/build/html/install.html, for mlx 0.32); Apple went from 15 to 26
# (2025), so 16 to 25 do not exist. A release after 26 is added here when it ships.
MACOS_MAJORS = (14, 15, 26)

DEFAULT_ENDPOINT = "https://huggingface.co"

# The largest config.json, shard index or kv_config.json read, local or from the Hub: a
# 200,000-tensor index is ~15 MB, so 64 MB is 4x the largest real one; anything past it is not
# the small JSON file mlxfit expects (a /dev/zero, a 2 GB sparse file) and is refused unread.
MAX_JSON_BYTES = 64_000_000

# The largest file size believed from the Hub or the metadata cache: 2^53 bytes (9 PB) is
# JavaScript's exact-integer limit, so every JSON client reads it unchanged, and no real shard
# is within a factor of 10^5 of it. Past it a size is an error, not a number to sum.
MAX_FILE_BYTES = 2**53


# The largest number of seconds an environment variable may give a timeout, deadline or wait:
# a week. Past it (or infinite) a value is a typo, and an infinite one would never time out.
MAX_ENV_SECONDS = 7 * 24 * 3600

# The proxy variables huggingface_hub's session (httpx, trust_env) reads, and the schemes it
# takes; a malformed one was an httpx traceback at the first request.
PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")


def check_hub_environment(environ: Mapping[str, str] | None = None) -> None:
    """Before the Hub is read: UsageError naming HF_HUB_DOWNLOAD_TIMEOUT if it is not a
    number of seconds, or the first proxy variable that is not a proxy URL (scheme http,
    https, socks5 or socks5h; a host; a port 1-65535 if any; no spaces or controls). Each was a
    traceback from huggingface_hub or httpx."""
    env = os.environ if environ is None else environ
    if _timeout(env) is None:
        raise UsageError("HF_HUB_DOWNLOAD_TIMEOUT must be a number of seconds, more than 0 and "
                         f"at most {MAX_ENV_SECONDS:,}, got "
                         f"{_shown_env(env.get('HF_HUB_DOWNLOAD_TIMEOUT', ''))}")
    for var in PROXY_VARS:
        raw = env.get(var)
        if not raw:
            continue
        url = raw if "://" in raw else "http://" + raw  # httpx's reading of a bare host:port
        try:
            parts = urlsplit(url)
            port_ok = parts.port is None or parts.port > 0  # .port raises past 65535
        except ValueError:
            parts, port_ok = None, False
        if (parts is None or not port_ok or parts.scheme.lower() not in _PROXY_SCHEMES
                or not parts.hostname or any(c.isspace() or not c.isprintable() for c in raw)):
            # the value is not shown: a proxy URL may carry a password
            raise UsageError(f"{var} is not a usable proxy URL (scheme http, https, socks5 or "
                             "socks5h, a host, a port 1-65535, no spaces)")


# --------------------------------------------------------------------------- the values


@dataclass(frozen=True)
class HubSettings:
    """How the Hub is asked. The tunables can be set with ``MLXFIT_HUB_<FIELD>``."""

    endpoint: str = DEFAULT_ENDPOINT
    offline: bool = False
    timeout: float = 10.0  # per request: HF_HUB_DOWNLOAD_TIMEOUT
    implicit_token: bool = True  # False: HF_HUB_DISABLE_IMPLICIT_TOKEN
    retries: int = 4  # extra attempts after the first, for 408/429/5xx, timeouts, cut connections
    backoff_seconds: float = 0.5  # first wait; doubles up to max_wait_seconds
    max_wait_seconds: float = 8.0  # caps the backoff (a server's own ask: RATE_LIMIT_MAX_WAIT)
    max_workers: int = 64  # concurrent requests; 100 shards = 2 waves
    ref_ttl_seconds: float = 24 * 3600  # a branch or tag -> commit mapping is trusted this long
    max_json_bytes: int = MAX_JSON_BYTES  # config/index/kv_config (also the local cap)
    max_info_bytes: int = 64_000_000  # the model info
    # Wall-clock bounds (a server that drips a byte every few seconds never trips the per-read
    # timeout): one request, retries included, and the whole fetch. A real fetch of a
    # 1,000-shard model is ~2,000 requests in 64 parallel waves: 30-60 s on a slow link.
    request_deadline_seconds: float = 60.0
    fetch_deadline_seconds: float = 300.0
    # The largest model*.safetensors count planned: the biggest real checkpoints have ~300
    # shards (DeepSeek-V3 bf16: 163; Kimi K2 bf16 ~ 1,000 at 2 GB each is the far end). 4,096
    # keeps a listing of 100,000 names from costing 200,000 requests.
    max_shards: int = 4096
    # mlxfit's own cache entries inflate to at most this many bytes (a legitimate entry is the
    # JSON files plus the headers, base64: 4,096 shards' headers of a 200,000-tensor model are
    # ~100 MB); past it a gzip member is a bomb, not an entry.
    max_cache_entry_bytes: int = 512_000_000


# The fields MLXFIT_HUB_<FIELD> sets (the others have Hugging Face's own variables).
_HUB_TUNABLES = ("retries", "backoff_seconds", "max_wait_seconds", "max_workers",
                 "ref_ttl_seconds", "max_json_bytes", "max_info_bytes",
                 "request_deadline_seconds", "fetch_deadline_seconds", "max_shards",
                 "max_cache_entry_bytes")


@dataclass(frozen=True)
class Settings:
    """Where mlxfit's files are and how the Hub is asked, as the environment said."""

    config_dir: Path | None  # None: no home directory and no XDG_CONFIG_HOME
    cache_dir: Path  # mlxfit's own cache; Hub metadata under cache_dir / "hub"
    results_file: Path | None  # None: no home directory
    hf_hub_cache: Path  # the Hugging Face hub cache (models--org--name folders)
    catalog_dir: Path = field(default_factory=resources.catalog_dir)  # the built-in catalog
    hub: HubSettings = field(default_factory=HubSettings)

    def user_file(self, name: str) -> Path | None:
        return self.config_dir / name if self.config_dir is not None else None

    @property
    def calibration_file(self) -> Path | None:
        """Written by `mlxfit calibrate --write`, layered over the shipped constants."""
        return self.user_file("calibration.toml")

    @property
    def sku_file(self) -> Path | None:
        """Chips added or corrected by the user, merged over data/apple_skus.toml."""
        return self.user_file("apple_skus.toml")

    @property
    def links_file(self) -> Path | None:
        return self.user_file("links.toml")

    @property
    def config_file(self) -> Path | None:
        """config.toml: one table per verb ([pick])."""
        return self.user_file("config.toml")

    @property
    def hub_cache_dir(self) -> Path:
        """Where Hub metadata is kept: <cache dir>/hub/<endpoint host>/models--org--name/."""
        return self.cache_dir / "hub"


# --------------------------------------------------------------------------- the environment


def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _home(environ: Mapping[str, str]) -> str | None:
    """$HOME, else the passwd entry (as os.path.expanduser), else None."""
    if "HOME" in environ:
        return environ["HOME"]
    try:
        return pwd.getpwuid(os.getuid()).pw_dir if pwd is not None else None
    except KeyError:
        return None


_VAR = r"(?a)\$(\w+|\{[^}]*\})"  # compiled on first use (re caches it): start-up


def _expand(value: str, environ: Mapping[str, str]) -> str:
    """os.path.expandvars(os.path.expanduser(value)) against ``environ``."""
    if value == "~" or value.startswith("~/"):
        home = _home(environ)
        if home is not None:
            value = (home.rstrip("/") + value[1:]) or "/"
    elif value.startswith("~"):
        value = os.path.expanduser(value)  # ~user: the passwd database

    def sub(m: re.Match[str]) -> str:
        name = m.group(1).strip("{}")
        return environ.get(name, m.group(0))

    return re.sub(_VAR, sub, value) if "$" in value else value


def _shown_env(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")  # 5,000 digits: one short line


def _timeout(environ: Mapping[str, str]) -> float | None:
    """HF_HUB_DOWNLOAD_TIMEOUT in seconds (default 10); None when it is not a number of
    seconds in (0, MAX_ENV_SECONDS] (NaN, 0, negative, inf, 5,000 digits)."""
    raw = environ.get("HF_HUB_DOWNLOAD_TIMEOUT") or "10"
    try:
        t = float(raw) if len(raw) <= 40 else math.nan
    except ValueError:
        return None
    return t if 0 < t <= MAX_ENV_SECONDS else None


def _hub(environ: Mapping[str, str]) -> HubSettings:
    # A bad value is the default here, where a local model needs no Hub; reading the Hub
    # refuses it (check_hub_environment), as huggingface_hub itself would at import.
    timeout = _timeout(environ) or 10.0
    tunables: dict[str, Any] = {}
    defaults = HubSettings()
    for f in fields(HubSettings):
        if f.name not in _HUB_TUNABLES:
            continue
        var = "MLXFIT_HUB_" + f.name.upper()
        raw = environ.get(var)
        if not raw:
            continue
        kind = type(getattr(defaults, f.name))
        try:  # bounded before int(): 5,000 digits raise, 10^30 bytes is no cap
            v = kind(raw) if len(raw) <= 40 else -1
        except ValueError:
            v = -1
        top = MAX_FILE_BYTES if kind is int else MAX_ENV_SECONDS
        if not 0 <= v <= top:
            what = "a whole number" if kind is int else "a number"
            raise UsageError(f"{var} must be {what} from 0 to {top:,}, got {_shown_env(raw)}")
        tunables[f.name] = v
    return HubSettings(
        endpoint=(environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
        offline=_truthy(environ.get("HF_HUB_OFFLINE") or environ.get("TRANSFORMERS_OFFLINE")),
        timeout=timeout,
        implicit_token=not _truthy(environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN")),
        **tunables,
    )


def from_environ(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings for ``environ`` (default: ``os.environ`` as it is now)."""
    env = os.environ if environ is None else environ
    home = _home(env)
    xdg_config = env.get("XDG_CONFIG_HOME")
    if xdg_config:
        config_dir: Path | None = Path(xdg_config) / "mlxfit"
    else:
        config_dir = Path(home, ".config", "mlxfit") if home is not None else None

    home_or_tilde = home if home is not None else "~"  # os.path.expanduser's fallback
    explicit = env.get("MLXFIT_CACHE_DIR")
    if explicit:
        cache_dir = Path(_expand(explicit, env))
    else:
        cache_dir = Path(env.get("XDG_CACHE_HOME") or os.path.join(home_or_tilde, ".cache"),
                         "mlxfit")

    # Beside the Hub metadata, in mlxfit's own cache (MLXFIT_CACHE_DIR, XDG_CACHE_HOME honoured).
    results = (cache_dir / "measurements.jsonl"
               if explicit or env.get("XDG_CACHE_HOME") or home is not None else None)

    hf_home = env.get("HF_HOME") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(home_or_tilde, ".cache"), "huggingface")
    hf_default = env.get("HUGGINGFACE_HUB_CACHE") or os.path.join(hf_home, "hub")
    hf_cache = Path(_expand(env.get("HF_HUB_CACHE") or hf_default, env))

    return Settings(config_dir=config_dir, cache_dir=cache_dir, results_file=results,
                    hf_hub_cache=hf_cache, hub=_hub(env))


def user_calibration(settings: Settings | None = None) -> Path | None:
    """The user's calibration file (written by `mlxfit calibrate --write`), or None when there
    is no home directory to keep it in."""
    return (settings or from_environ()).calibration_file


# --------------------------------------------------------------------------- TOML files


def read_toml(path: Path, what: str, error: type[MlxfitError] = MlxfitError) -> dict[str, Any]:
    """The TOML document at ``path``. Unreadable, not UTF-8, not TOML or nested beyond reason:
    ``error`` in one line, ``cannot read <what> <path>: <why>``."""
    try:  # a FIFO or /dev/zero named like a settings file must neither hang nor fill memory
        data = read_regular(path, MAX_JSON_BYTES)
    except OSError as e:
        raise error(f"cannot read {what} {path}: {why(e)}".replace("\n", " ")) from None
    return parse_toml(data, f"{what} {path}", error)


def parse_toml(text: str | bytes, what: str,
               error: type[MlxfitError] = MlxfitError) -> dict[str, Any]:
    """``text`` (bytes: UTF-8) as a TOML document; ``error`` in one line when it is not one."""
    try:
        return tomllib.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise error(f"cannot read {what}: {e}".replace("\n", " ")) from None


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` layered on ``base``: tables merge key by key; anything else (arrays such as
    ``variants``, scalars) is replaced. Neither argument is changed."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def config_table(name: str, path: Path | None = None,
                 settings: Settings | None = None) -> tuple[Path | None, dict[str, Any]]:
    """(the file, its ``[name]`` table) from config.toml (``path``, default the user's). A
    missing file or table is an empty table; other verbs' tables are not looked at."""
    p = path.expanduser() if path is not None else (settings or from_environ()).config_file
    try:
        if p is None or not p.is_file():
            return p, {}
    except OSError as e:  # e.g. ~/.config unreadable: say which file, do not guess
        raise UsageError(f"cannot read the settings file {p}: {e.strerror or e}") from None
    table = read_toml(p, "the settings file", UsageError).get(name, {})
    if not isinstance(table, dict):
        raise UsageError(f"{p}: [{name}] must be a table")
    return p, table


# MLX's own command-buffer variables (mlx/backend/metal/device.cpp reads them at start-up).
MLX_SCHEDULER_VARS = ("MLX_MAX_OPS_PER_BUFFER", "MLX_MAX_MB_PER_BUFFER")


def mlx_scheduler_env(environ: Mapping[str, str] | None = None) -> list[str]:
    """The MLX scheduler variables set in ``environ`` (default ``os.environ``), as NAME=VALUE:
    they change this Mac's prediction (mlxfit.estimate.command_buffers)."""
    env = os.environ if environ is None else environ
    return [f"{k}={env[k]}" for k in MLX_SCHEDULER_VARS if env.get(k)]
