"""Strings from models reach Rich markup and the terminal escaped (issue 13, class 2): a
model_type of ``zz[/]`` (Rich's MarkupError), ``[blink]`` (a restyle), ESC sequences that set
the window title or clear the screen, and C1 controls, in folder names, config strings, extra
file names, cached repo ids, index shard names and Hub file names, through fit (with
--explain and --advise), matrix, pick and the error line. Each is asserted on the real CLI's
output: the value is shown literally, no control character reaches the output, the exit code
is a verdict (0/1) or a one-line error (2)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from st_helpers import M4PRO, invoke, make_folder, make_hf_cache

from mlxfit.render.text import controls, esc

MARKUP = "zz[/][blink]b[/blink][bold red]"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\x9b2J\x85\x00"
TINY = {"model.embed_tokens.weight": ("BF16", [64, 32]),
        "model.layers.0.mlp.down_proj.weight": ("BF16", [32, 64])}
CONFIG = {"model_type": "qwen3", "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 64,
          "intermediate_size": 64, "max_position_embeddings": 65536,
          # the rest of what mlx-lm's qwen3 ModelArgs requires
          "head_dim": 8, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "rope_theta": 1e6}
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # \t and \n are Rich's own layout


def clean(r, *shown: str) -> str:
    out = r.output
    assert r.exit_code in (0, 1, 2), (r.exit_code, out, r.exception)
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert not CONTROL.search(out), repr(out)
    for s in shown:
        assert s in out, (s, out)
    return out


def hostile_folder(root: Path) -> Path:
    # a folder name may hold anything but "/" and NUL
    name = "[blink]m\x1b]0;pwned\x07\x1b[2J\x9b"
    folder = make_folder(root / name, dict(CONFIG, model_type="zz[/]\x1b[2J"),
                         {"model.safetensors": TINY})
    (folder / "consolidated[blink]\x1b[2J.safetensors").write_bytes(b"")
    return folder


@pytest.mark.parametrize("extra", [(), ("--explain",), ("--advise",), ("--ctx", "100000")])
def test_fit_report(tmp_path: Path, extra: tuple[str, ...]) -> None:
    folder = hostile_folder(tmp_path)
    r = invoke("fit", str(folder), "--machine", M4PRO, *extra)
    clean(r, "zz[/]\\x1b[2J", "[blink]m\\x1b]0;pwned\\x07\\x1b[2J\\x9b",
          "consolidated[blink]\\x1b[2J.safetensors")


def test_matrix_report(tmp_path: Path) -> None:
    r = invoke("matrix", str(hostile_folder(tmp_path)), "--ctx", "4096")
    clean(r, "[blink]m\\x1b]0;pwned", "zz[/]")


@pytest.mark.parametrize("verb", [("pick", "--machine", M4PRO, "--ctx", "4096"), ("models",),
                                  ("models", "acme", "--format", "markdown"),
                                  ("models", "acme", "--format", "csv")])
def test_reports_with_hostile_cached_repo_ids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              verb: tuple[str, ...]) -> None:
    cache = tmp_path / "hub"
    files = {"config.json": json.dumps(dict(CONFIG, model_type="zz[/]")).encode(),
             "model.safetensors": TINY}
    make_hf_cache(cache, "acme/[blink]ok\x1b[2J", files, commit="a" * 40)
    make_hf_cache(cache, "acme/bad[i]\x1b]0;t\x07", {"config.json": b"[/]\x1b"}, commit="b" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    r = invoke(*verb)
    shown = "acme/[blink]ok\\x1b[2J"
    # Markdown escapes the backslash itself, so the rendered page shows \x1b
    clean(r, shown.replace("\\", "\\\\") if "markdown" in verb else shown)
    if verb[0] == "pick":  # pick also names the entry it could not read
        clean(r, "bad[i]\\x1b]0;t\\x07")


@pytest.mark.parametrize("case", ["model_type", "index shard", "folder"])
def test_error_lines(tmp_path: Path, case: str) -> None:
    if case == "model_type":
        folder = make_folder(tmp_path / "m", dict(CONFIG, model_type="zz[/]\x1b]0;t\x07",
                                                  num_attention_heads="x"),
                             {"model.safetensors": TINY})
    elif case == "index shard":
        folder = make_folder(tmp_path / "m", CONFIG, {"model.safetensors": TINY})
        (folder / "model.safetensors.index.json").write_text(json.dumps(
            {"weight_map": {"w": "\x1b]0;pwned\x07[/].safetensors"}}))
    else:
        folder = tmp_path / "no[/]\x1b[2J"
    r = invoke("fit", str(folder), "--machine", M4PRO)
    out = clean(r)
    assert r.exit_code == 2 and out.count("\n") == 1 and out.startswith("mlxfit: error: "), out


def test_hub_file_names(tmp_path: Path) -> None:
    """A Hub listing whose file names carry ESC: the plan refuses the shard name, one line."""
    from mlxfit.errors import WeightsError
    from mlxfit.sources.hub.plan import _plan

    with pytest.raises(WeightsError) as e:
        _plan("acme/x", "0" * 40, [("model\x1b]0;t\x07.safetensors", 1), ("config.json", 1)])
    from mlxfit.cli.common import error_text

    assert not CONTROL.search(controls(error_text(e.value)))
    with pytest.raises(WeightsError) as e:  # no shard at all: the listing is in the message
        _plan("acme/x", "0" * 40, [("\x1b[2Jweights.gguf", 1)])
    assert "\x1b" not in repr(str(e.value)) or not CONTROL.search(controls(str(e.value)))


@settings(max_examples=200, deadline=None, database=None)
@given(st.text())
def test_esc_round_trips_through_rich(value: str) -> None:
    """Any text, escaped, renders as itself with its controls shown, inside any markup."""
    from rich.console import Console

    c = Console(file=open(os.devnull, "w"), width=10_000, emoji=False, highlight=False)  # noqa: SIM115
    with c.capture() as cap:
        c.print(f"[bold]{esc(value)}[/] [dim]x{esc(value)}[/]", soft_wrap=True)
    assert cap.get() == f"{controls(value)} x{controls(value)}\n"


def bf16_folder(root: Path) -> Path:
    """A float model with a hostile name (matrix --quants sizes conversions of float weights)."""
    name = "[blink]f\x1b]0;pwned\x07\x9b"
    return make_folder(root / name, CONFIG, {"model.safetensors": TINY})


@pytest.mark.parametrize("verb", [
    ("serve-plan", "{m}", "--ctx", "4096", "--machine", M4PRO),
    ("matrix", "{m}", "--ctx", "4096", "--quants", "4,8"),
    ("cluster", "{m}", "--ctx", "4096", "--host", M4PRO, "--host", M4PRO),
])
def test_other_reports(tmp_path: Path, verb: tuple[str, ...]) -> None:
    folder = bf16_folder(tmp_path)
    r = invoke(*(a.format(m=folder) for a in verb))
    clean(r, "[blink]f\\x1b]0;pwned\\x07\\x9b")


def test_machine_with_a_hostile_name() -> None:
    """An unknown machine name with markup and ESC: the error line shows it, inert."""
    r = invoke("machine", "zz[/]\x1b[2J")
    out = clean(r)
    assert r.exit_code == 2 and "zz[/]\\x1b[2J" in out and out.count("\n") == 1, out
