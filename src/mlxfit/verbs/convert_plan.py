"""Size a model as ``mlx_lm.convert`` would write it: the twins' --q-bits, --q-group-size,
--q-mode, --quant-predicate and --dtype turned into a converted ModelSource (the predicted
tensors and config, model/quantize.py), which the estimate then sizes like any other."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mlxfit.errors import ConfigError, UsageError
from mlxfit.model.families import mlx_lm_module
from mlxfit.model.quantize import (
    ConversionPlan,
    QuantizationPlan,
    QuantRecipe,
    check_recipe,
    plan_conversion,
    recipe_from_label,
)
from mlxfit.model.tensors import SAFETENSORS_TO_MLX
from mlxfit.sources.source import ModelSource

CONVERTED_PATH = "mlx_model"  # mlx_lm.convert's default --mlx-path: where the result is run from


def quant_recipe(q_bits: int | None = None, q_group_size: int | None = None,
                 q_mode: str | None = None, quant_predicate: str | None = None,
                 dtype: str | None = None) -> QuantRecipe | None:
    """The convert flags as a recipe (checked), or None when none is given."""
    if q_bits is None and q_group_size is None and q_mode is None and quant_predicate is None:
        if dtype is None:
            return None
        r = QuantRecipe(dtype=dtype, quantize=False)
    else:
        r = QuantRecipe(bits=q_bits, group_size=q_group_size, mode=q_mode or "affine",
                        predicate=quant_predicate, dtype=dtype)
    check_recipe(r)
    return r


def quant_recipes(quants: str, q_group_size: int | None = None,
                  dtype: str | None = None) -> tuple[QuantRecipe, ...]:
    """``--quants 3,4,6,8,mixed_3_6,mxfp4``: one recipe each, in the order given."""
    labels = [s for s in quants.split(",") if s.strip()]
    if not labels:
        raise UsageError("quants is empty (give e.g. 4,8,mixed_3_6,mxfp4)", param="quants")
    out = tuple(recipe_from_label(s, group_size=q_group_size, dtype=dtype) for s in labels)
    if len({r.label for r in out}) != len(out):
        raise UsageError(f"quants {quants!r} names one quantization twice", param="quants")
    return out


def pick_recipes(quants: str | None, q_bits: int | None = None, q_group_size: int | None = None,
                 q_mode: str | None = None, quant_predicate: str | None = None,
                 dtype: str | None = None) -> tuple[QuantRecipe, ...]:
    """pick's conversions: the --quants list and/or the one the convert flags name."""
    one = quant_recipe(q_bits, q_group_size, q_mode, quant_predicate, dtype)
    listed = quant_recipes(quants, q_group_size, dtype) if quants is not None else ()
    return listed + tuple(r for r in (one,) if r is not None and r not in listed)


def family_of(config: dict[str, Any], where: str) -> str:
    mt = config.get("model_type")
    if not isinstance(mt, str):
        raise ConfigError(f"{where}: no model_type, so mlx-lm's converter cannot be followed")
    return mlx_lm_module(mt)


def converted_source(src: ModelSource, recipe: QuantRecipe,
                     model_ref: str | None = None) -> tuple[ModelSource, QuantizationPlan]:
    """``src`` as mlx_lm.convert would write it with ``recipe``, and the plan."""
    plan = plan_conversion(src.tensors, src.config, family_of(src.config, src.name), recipe)
    config = dict(src.config)
    for k in ("quantization", "quantization_config"):
        config.pop(k, None)  # an FP8 checkpoint's transformers block: dequantized on convert
    config.update(plan.config)
    if plan.dtype is not None:
        config["torch_dtype"] = SAFETENSORS_TO_MLX[plan.dtype]
    cmd = recipe.command(model_ref or src.name)
    sized = (f"sized as `{cmd}` would write it: {plan.weight_bytes / 1e9:,.2f} GB of weights, "
             f"{plan.bits_per_weight:.3f} bits per weight")
    notes = (sized, *plan.notes, *src.notes)
    return replace(src, config=config, tensors=plan.tensors, files=(), notes=notes,
                   as_loaded=True), plan


def conversion_plan(plan: QuantizationPlan, model_ref: str) -> ConversionPlan:
    """The plan as the reports give it: the command for ``model_ref``, figures rounded."""
    q = plan.recipe.quantize
    return ConversionPlan(
        label=plan.recipe.label,
        command=plan.recipe.command(model_ref),
        family=plan.family,
        family_rules_verified=plan.verified,
        quantize=q,
        mode=plan.mode if q else None,
        bits=plan.bits if q else None,
        group_size=plan.group_size if q else None,
        quant_predicate=plan.recipe.predicate,
        dtype=SAFETENSORS_TO_MLX[plan.dtype] if plan.dtype else None,
        quantized_modules=plan.quantized_modules,
        float_modules=plan.float_modules,
        weight_bytes=plan.weight_bytes,
        disk_bytes=plan.disk_bytes,
        disk_bytes_uncertainty=plan.header_uncertainty_bytes,
        shards=plan.shards,
        n_tensors=len(plan.tensors),
        total_parameters=plan.total_parameters,
        bits_per_weight=round(plan.bits_per_weight, 4),
        config_quantization=plan.config.get("quantization"),
    )


def predicted_quants(src: ModelSource, recipes: tuple[QuantRecipe, ...],
                     model_ref: str) -> list[tuple[str, ModelSource, ConversionPlan]]:
    """(name, converted source, plan) per recipe for an unquantized ``src``; none for a
    quantized one or one mlx-lm's converter would refuse. The name is "<model> as <label>"."""
    if not recipes or src.config.get("quantization") is not None:
        return []
    out = []
    for r in recipes:
        try:
            conv, plan = converted_source(src, r, model_ref)
        except (ConfigError, UsageError):  # e.g. a recipe on a model without down_proj
            continue
        out.append((f"{model_ref} as {r.label}", replace(conv, name=f"{model_ref} as {r.label}"),
                    conversion_plan(plan, model_ref)))
    return out
