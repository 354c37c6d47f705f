"""`mlxfit models [QUERY]`: the built-in catalog and the models in the local Hugging Face cache,
searchable, each with its family, quantization, weights and context limit (no machine, no fit).

Offline by construction: the catalog ships with mlxfit and the cache is read as `pick` reads it
(the same scan, so a model listed here is one `pick` would consider)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mlxfit.json_result import JsonResult
from mlxfit.model.inputs import ModelInputs, model_inputs
from mlxfit.model.quantize import ConversionPlan
from mlxfit.settings import from_environ
from mlxfit.sources.catalog import catalog_ids, load_entry
from mlxfit.sources.hf_cache import hf_hub_cache_dir
from mlxfit.sources.source import CATALOG_NOTE, ModelSource
from mlxfit.verbs.convert_plan import predicted_quants, quant_recipes
from mlxfit.verbs.pick import Skipped, quant_label, scan_cache


@dataclass(frozen=True)
class ModelRow:
    model: str  # the repo id, as `fit` takes it
    source: str  # "catalog" | "hf-cache"
    revision: str | None  # the cached snapshot (hf-cache), None for the catalog
    family: str  # mlx-lm's model module ("qwen3", "llama", ...)
    model_type: str  # config.json's model_type
    quant: str  # "4-bit", "bf16", "mxfp4", ...
    weights_bytes: int  # exact, from the safetensors headers (or the catalog's manifest)
    param_count: int
    context_limit: int | None  # max_position_embeddings; None when the config has none
    downloaded: bool  # in the local cache
    in_catalog: bool = False  # the built-in catalog has this repo id (a cached row may too)
    # A predicted conversion of an unquantized catalog entry (--quants): the mlx_lm.convert
    # command that would write it; None for a model that exists.
    convert_command: str | None = None


@dataclass(frozen=True)
class ModelsResult(JsonResult):
    JSON_RENDERER: ClassVar[str] = "mlxfit.render.models:models_to_json"
    query: str | None
    rows: tuple[ModelRow, ...]  # matching rows: downloaded first, then the catalog, by name
    total: int  # rows before the query
    cache_dir: str
    skipped: tuple[Skipped, ...] = ()  # cached repos that are not loadable models, and why


def _row(inputs: ModelInputs, source: str, revision: str | None, downloaded: bool,
         convert: ConversionPlan | None = None, in_catalog: bool = False) -> ModelRow:
    """``convert``: the plan of a predicted conversion (its label is the
    quant: "mixed_3_6" says more than the 4 bits its config block names)."""
    cfg, w = inputs.cfg, inputs.weights_detail
    return ModelRow(model=inputs.name, source=source, revision=revision, family=cfg.family,
                    model_type=cfg.model_type,
                    quant=convert.label if convert else quant_label(w),
                    weights_bytes=inputs.weights.total_bytes,
                    param_count=int(w.param_count or 0),
                    context_limit=cfg.max_position, downloaded=downloaded,
                    in_catalog=in_catalog, convert_command=convert.command if convert else None)


def _word(word: str) -> re.Pattern[str]:
    """A query word as a whole word of the text: it starts where a name part starts and does
    not stop inside a run of letters or of digits, so "8B" finds Qwen3-8B but not 8bit, "3b"
    not A3B or 30B, while "qwen" still finds Qwen3 and "qwen3-8b" a run of parts."""
    tail = "(?![a-z])" if word[-1].isalpha() else "(?![0-9])" if word[-1].isdigit() else ""
    return re.compile(rf"(?<![a-z0-9]){re.escape(word)}{tail}")


def matches(row: ModelRow, query: str | None) -> bool:
    """Every word of the query is a word of the row's id, family, model_type, quant or
    source (any case; see ``_word``)."""
    if not query:
        return True
    text = f"{row.model} {row.family} {row.model_type} {row.quant} {row.source}".casefold()
    return all(_word(word).search(text) for word in query.casefold().split())


def models(query: str | None = None, *, cache_dir: str | Path | None = None,
           quants: str | None = None) -> ModelsResult:
    """The catalog and the cached models whose id, family, model_type or quant contain every
    word of ``query`` (all of them without one). ``quants`` ("4,mixed_3_6,mxfp4", as matrix and
    pick take it) adds, after each unquantized catalog entry, the models mlx_lm.convert would
    write from it ("<id> as 4bit"), sized exactly as ``fit --q-bits ...`` sizes them."""
    recipes = quant_recipes(quants) if quants is not None else ()
    settings = from_environ()
    cache = Path(cache_dir) if cache_dir is not None else hf_hub_cache_dir(settings)
    loaded, skipped, _ = scan_cache(cache)
    known = {rid.casefold() for rid in catalog_ids(settings.catalog_dir)}
    # A cached repo the catalog also has is one row, the downloaded copy (ux-3 F11).
    cached = [_row(ld.inputs, "hf-cache", ld.revision, True,
                   in_catalog=ld.inputs.name.casefold() in known) for ld in loaded]
    have = {r.model.casefold() for r in cached}
    listed = []
    for rid in catalog_ids(settings.catalog_dir):
        e = load_entry(rid, settings.catalog_dir)
        if e is None:  # pragma: no cover - listed ids always load or raise
            continue
        src = ModelSource(name=e.repo_id, kind="catalog", location="built-in catalog",
                          config=e.config, tensors=e.tensors, files=(), notes=(CATALOG_NOTE,))
        if rid.casefold() not in have:
            listed.append(_row(model_inputs(src), "catalog", None, False, in_catalog=True))
        for _, conv, plan in predicted_quants(src, recipes, e.repo_id):
            listed.append(_row(model_inputs(conv), "catalog", None, False, plan))
    every = sorted(cached, key=lambda r: r.model.casefold()) + listed
    rows = tuple(r for r in every if matches(r, query))
    return ModelsResult(query=query, rows=rows, total=len(every), cache_dir=str(cache),
                        skipped=tuple(skipped))
