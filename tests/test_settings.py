"""mlxfit.settings: where the per-user files and caches are for a given environment (the
precedence of XDG_CONFIG_HOME, MLXFIT_CACHE_DIR, XDG_CACHE_HOME, HF_HOME, HF_HUB_CACHE...),
read at call time, and a verb run with the variables set picking the files up; the one TOML
reader and deep merge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mlxfit
from mlxfit.errors import MachineError, UsageError
from mlxfit.settings import (
    HubSettings,
    config_table,
    deep_merge,
    from_environ,
    parse_toml,
    read_toml,
)
from mlxfit.verbs.pick import load_settings

CATALOG_MODEL = "mlx-community/Llama-3.2-1B-Instruct-4bit"  # built-in catalog: no network
HOME = {"HOME": "/home/u"}


# --------------------------------------------------------------------------- precedence


@pytest.mark.parametrize("env, config_dir", [
    (HOME, "/home/u/.config/mlxfit"),
    ({**HOME, "XDG_CONFIG_HOME": "/xdg/config"}, "/xdg/config/mlxfit"),
    ({**HOME, "XDG_CONFIG_HOME": ""}, "/home/u/.config/mlxfit"),  # empty: unset
])
def test_user_files_follow_xdg_config_home(env, config_dir) -> None:
    s = from_environ(env)
    d = Path(config_dir)
    assert s.config_dir == d
    assert (s.calibration_file, s.sku_file, s.links_file, s.config_file) == (
        d / "calibration.toml", d / "apple_skus.toml", d / "links.toml", d / "config.toml")


@pytest.mark.parametrize("env, cache_dir", [
    (HOME, "/home/u/.cache/mlxfit"),
    ({**HOME, "XDG_CACHE_HOME": "/xdg/cache"}, "/xdg/cache/mlxfit"),
    ({**HOME, "XDG_CACHE_HOME": "/xdg/cache", "MLXFIT_CACHE_DIR": "/mine"}, "/mine"),
    ({**HOME, "MLXFIT_CACHE_DIR": "~/mine"}, "/home/u/mine"),
    ({**HOME, "MLXFIT_CACHE_DIR": "$SCRATCH/mlxfit", "SCRATCH": "/scratch"}, "/scratch/mlxfit"),
])
def test_cache_dir_precedence(env, cache_dir) -> None:
    s = from_environ(env)
    assert s.cache_dir == Path(cache_dir)
    assert s.hub_cache_dir == Path(cache_dir) / "hub"
    # `mlxfit measure --save` appends in mlxfit's cache, wherever the environment puts it
    # (ux-3 F19: XDG_CACHE_HOME was honoured for the Hub cache only).
    assert s.results_file == Path(cache_dir) / "measurements.jsonl"


HF_CASES = [
    ({}, "/home/u/.cache/huggingface/hub"),
    ({"XDG_CACHE_HOME": "/xdg/cache"}, "/xdg/cache/huggingface/hub"),
    ({"XDG_CACHE_HOME": "/xdg/cache", "HF_HOME": "/hf"}, "/hf/hub"),
    ({"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/old-hub"}, "/old-hub"),
    ({"HF_HOME": "/hf", "HUGGINGFACE_HUB_CACHE": "/old-hub", "HF_HUB_CACHE": "/hub"}, "/hub"),
    ({"HF_HUB_CACHE": "~/hub"}, "/home/u/hub"),
]


@pytest.mark.parametrize("extra, hub", HF_CASES)
def test_hf_hub_cache_precedence(extra, hub) -> None:
    assert from_environ({**HOME, **extra}).hf_hub_cache == Path(hub)


@pytest.mark.parametrize("extra, hub", HF_CASES[1:5])
def test_hf_hub_cache_is_where_huggingface_hub_looks(tmp_path: Path, extra, hub) -> None:
    """The same answer as huggingface_hub's own constants, in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME")}
    env.update(extra, HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "-c",
                        "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"],
                       env=env, capture_output=True, text=True, check=True)
    assert Path(r.stdout.strip()) == from_environ(env).hf_hub_cache == Path(hub)


def test_no_home_directory(monkeypatch) -> None:
    import pwd

    def no_entry(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    s = from_environ({})
    assert s.config_dir is None and s.calibration_file is None and s.results_file is None
    assert s.cache_dir == Path("~/.cache/mlxfit")  # as os.path.expanduser leaves it
    assert from_environ({"XDG_CONFIG_HOME": "/x"}).config_dir == Path("/x/mlxfit")


def test_hub_settings_from_the_environment() -> None:
    assert from_environ(HOME).hub == HubSettings()
    h = from_environ({"HF_ENDPOINT": "http://127.0.0.1:9/", "TRANSFORMERS_OFFLINE": "yes",
                      "HF_HUB_DOWNLOAD_TIMEOUT": "2.5", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
                      "MLXFIT_HUB_RETRIES": "1", "MLXFIT_HUB_BACKOFF_SECONDS": "0.01",
                      "MLXFIT_HUB_MAX_WORKERS": "3"}).hub
    assert (h.endpoint, h.offline, h.timeout, h.implicit_token) == (
        "http://127.0.0.1:9", True, 2.5, False)
    assert (h.retries, h.backoff_seconds, h.max_workers) == (1, 0.01, 3)
    assert from_environ({"HF_HUB_OFFLINE": "0", "HF_HUB_DOWNLOAD_TIMEOUT": "soon"}).hub == (
        HubSettings())  # a timeout huggingface_hub would not parse either: the default
    for var, bad in [("MLXFIT_HUB_RETRIES", "1.5"), ("MLXFIT_HUB_MAX_WAIT_SECONDS", "-1"),
                     ("MLXFIT_HUB_MAX_JSON_BYTES", "lots")]:
        with pytest.raises(UsageError, match=var):
            from_environ({var: bad})


def test_read_at_call_time(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "a"))
    assert from_environ().config_dir == tmp_path / "a" / "mlxfit"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "b"))
    monkeypatch.setenv("MLXFIT_CACHE_DIR", str(tmp_path / "c"))
    s = from_environ()
    assert (s.config_dir, s.cache_dir) == (tmp_path / "b" / "mlxfit", tmp_path / "c")


# --------------------------------------------------------------------------- verbs, env set


def test_fit_uses_and_names_the_calibration_in_xdg_config_home(tmp_path: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    before = mlxfit.fit(CATALOG_MODEL, 4096, machine="M4 Pro 24GB", backend="cpu")
    user = tmp_path / "xdg" / "mlxfit" / "calibration.toml"
    user.parent.mkdir(parents=True)
    user.write_text("[backend.cpu]\nact_hidden = 20.0\n")
    # Not under ~/.config: XDG_CONFIG_HOME wins.
    (tmp_path / "home" / ".config" / "mlxfit").mkdir(parents=True)
    (tmp_path / "home" / ".config" / "mlxfit" / "calibration.toml").write_text("decode = 5\n")
    after = mlxfit.fit(CATALOG_MODEL, 4096, machine="M4 Pro 24GB", backend="cpu")
    assert f"calibration: calibration.toml + {user}" in after.notes
    assert not any(n.startswith("calibration:") for n in before.notes)
    assert after.transient_bytes != before.transient_bytes


def test_pick_settings_and_sku_table_in_xdg_config_home(tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "xdg" / "mlxfit"
    d.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert load_settings().default_model is None  # none until the user sets one
    (d / "config.toml").write_text('[pick]\ndefault_model = "org/mine"\n[other]\nx = 1\n')
    s = load_settings()
    assert (s.default_model, s.default_model_from) == ("org/mine", str(d / "config.toml"))
    (d / "apple_skus.toml").write_text("[chips\n")
    with pytest.raises(MachineError, match=f"cannot read the SKU table {d / 'apple_skus.toml'}"):
        mlxfit.machine("M4 Pro 24GB")


def test_fit_does_not_import_pick() -> None:
    code = ("import sys\nfrom mlxfit.cli.app import main\n"
            f"sys.argv = ['mlxfit', 'fit', {CATALOG_MODEL!r}, '--machine', 'M4 Pro 24GB']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print([m for m in sys.modules if m.startswith('mlxfit.verbs.pick')])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "[]"


# --------------------------------------------------------------------------- TOML files


def test_read_toml_errors_are_one_line_and_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "x.toml"
    for content, why in [(b"[a\nb = 1\n", "Expected ']'"), (b"\xff\xfe", "utf-8"),
                         (b"a = " + b"[" * 100_000, "cannot read")]:
        p.write_bytes(content)
        with pytest.raises(MachineError) as e:
            read_toml(p, "the SKU table", MachineError)
        msg = str(e.value)
        assert msg.startswith(f"cannot read the SKU table {p}: ") and why in msg
        assert "\n" not in msg
    with pytest.raises(UsageError, match=f"cannot read the file {tmp_path / 'none'}: No such"):
        read_toml(tmp_path / "none", "the file", UsageError)
    assert parse_toml(b'a = "\xc3\xa9"', "x") == {"a": "\u00e9"}


def test_deep_merge() -> None:
    base = {"a": {"x": 1, "y": {"p": 1}}, "v": [1, 2], "s": 1}
    over = {"a": {"y": {"q": 2}, "z": 3}, "v": [3], "s": {"t": 1}}
    assert deep_merge(base, over) == {"a": {"x": 1, "y": {"p": 1, "q": 2}, "z": 3}, "v": [3],
                                      "s": {"t": 1}}
    assert base == {"a": {"x": 1, "y": {"p": 1}}, "v": [1, 2], "s": 1}  # unchanged


def test_config_table(tmp_path: Path) -> None:
    p = tmp_path / "config.toml"
    assert config_table("pick", p) == (p, {})
    p.write_text("[pick]\na = 1\n[cluster]\nb = 2\n")
    assert config_table("pick", p) == (p, {"a": 1})
    assert config_table("matrix", p) == (p, {})
    p.write_text("pick = 1\n")
    with pytest.raises(UsageError, match=r"\[pick\] must be a table"):
        config_table("pick", p)
