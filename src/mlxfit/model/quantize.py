"""The exact tensors ``mlx_lm.convert -q`` would write for an unquantized checkpoint, from its
headers and config.json alone (mlx-lm 0.32.2 on mlx 0.32.4; no mlx import).

The steps are convert's own (mlx_lm/convert.py, utils.quantize_model, utils.save_model):
the family's sanitize (model/convert_rules.py); the --dtype cast of floating parameters; then
``nn.quantize`` on every module with ``to_quantized`` (Linear, Embedding, SwitchLinear,
MultiLinear) whose weight's last dim divides the group size, as the family's
``quant_predicate`` or a mixed recipe says; then mx.quantize's packing per mode; then
mx.save_safetensors' shards (5 GiB each) and headers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mlxfit.errors import ConfigError, UsageError
from mlxfit.model.convert_rules import QUANTIZE_FAILS, Rules, Tensors, sanitized
from mlxfit.model.tensors import TensorInfo

# mlx.core.quantize / mlx.nn _defaults_for_mode: mode -> (group size, bits) when not given.
MODE_DEFAULTS = {"affine": (64, 4), "mxfp4": (32, 4), "nvfp4": (16, 4), "mxfp8": (32, 8)}
AFFINE_BITS = (1, 2, 3, 4, 5, 6, 8)  # mx.quantize: "The supported bits are 1, 2, 3, 4, 5, 6 and 8"
AFFINE_GROUPS = (32, 64, 128)  # "The supported group sizes are 32, 64, and 128"
RECIPES = {"mixed_2_6": (2, 6), "mixed_3_4": (3, 4), "mixed_3_6": (3, 6), "mixed_4_6": (4, 6)}
CONVERT_DTYPES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
SHARD_BYTES = 5 << 30  # utils.MAX_FILE_SIZE_GB = 5, shifted by 30 in make_shards
HEADER_METADATA = {"format": "mlx"}  # save_model's metadata


@dataclass(frozen=True)
class QuantRecipe:
    """mlx_lm.convert's flags: -q --q-bits --q-group-size --q-mode --quant-predicate --dtype."""

    bits: int | None = None
    group_size: int | None = None
    mode: str = "affine"
    predicate: str | None = None  # a mixed recipe
    dtype: str | None = None
    quantize: bool = True  # False: `--dtype` alone, a cast without -q

    def command(self, model: str) -> str:
        parts = ["mlx_lm.convert", "--hf-path", model] + (["-q"] if self.quantize else [])
        if self.bits is not None:
            parts += ["--q-bits", str(self.bits)]
        if self.group_size is not None:
            parts += ["--q-group-size", str(self.group_size)]
        if self.mode != "affine":
            parts += ["--q-mode", self.mode]
        if self.predicate:
            parts += ["--quant-predicate", self.predicate]
        if self.dtype:
            parts += ["--dtype", self.dtype]
        return " ".join(parts)

    @property
    def label(self) -> str:
        """Short name for a column: "4bit", "mixed_3_6", "mxfp4", "4bit-g32"."""
        if not self.quantize:
            return self.dtype or "float"
        if self.predicate:
            return self.predicate
        group, bits = resolved(self)
        if self.mode != "affine":
            return self.mode
        return f"{bits}bit" + ("" if group == 64 else f"-g{group}")


def recipe_from_label(label: str, *, group_size: int | None = None,
                      dtype: str | None = None) -> QuantRecipe:
    """One --quants entry: "4" or "4bit" (affine bits), "mixed_3_6", "mxfp4", "nvfp4", "mxfp8"."""
    s = label.strip().lower()
    if s in RECIPES:
        r = QuantRecipe(group_size=group_size, predicate=s, dtype=dtype)
    elif s in MODE_DEFAULTS and s != "affine":
        r = QuantRecipe(mode=s, dtype=dtype)
    elif s.removesuffix("bit").removesuffix("-").isdigit():
        r = QuantRecipe(bits=int(s.removesuffix("bit").removesuffix("-")), group_size=group_size,
                        dtype=dtype)
    else:
        raise UsageError(f"quants: {label!r} is not a quantization (give bits such as 4, "
                         f"a recipe {', '.join(RECIPES)}, or mxfp4, nvfp4, mxfp8)", param="quants")
    try:
        check_recipe(r)
    except UsageError as e:
        raise UsageError(f"quants {label!r}: {e}", param="quants") from None
    return r


def resolved(r: QuantRecipe) -> tuple[int, int]:
    """(group size, bits) after quantize_model's defaults_for_mode."""
    g, b = MODE_DEFAULTS[r.mode]
    return r.group_size or g, r.bits or b


def check_recipe(r: QuantRecipe) -> None:
    """The combinations convert or mx.quantize refuse, one UsageError each."""
    if r.mode not in MODE_DEFAULTS:
        raise UsageError(f"q_mode must be one of {', '.join(MODE_DEFAULTS)}, got {r.mode!r}",
                         param="q_mode")
    for name, v in (("q_bits", r.bits), ("q_group_size", r.group_size)):
        if v is not None and (type(v) is not int or v <= 0):
            raise UsageError(f"{name} must be a positive integer, got {v!r}", param=name)
    if r.dtype is not None and r.dtype not in CONVERT_DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(CONVERT_DTYPES)}, got {r.dtype!r}",
                         param="dtype")
    if r.predicate is not None:
        if r.predicate not in RECIPES:
            raise UsageError(f"quant_predicate must be one of {', '.join(RECIPES)}, got "
                             f"{r.predicate!r}", param="quant_predicate")
        if r.mode != "affine":  # convert.py
            raise UsageError("quant_predicate: mlx_lm.convert's mixed recipes only support "
                             f"affine quantization, not q_mode {r.mode}", param="quant_predicate")
    group, bits = resolved(r)
    if r.mode == "affine":
        if bits not in AFFINE_BITS:
            raise UsageError(f"q_bits {bits}: mx.quantize supports affine bits "
                             f"{', '.join(map(str, AFFINE_BITS))}", param="q_bits")
        if group not in AFFINE_GROUPS:
            raise UsageError(f"q_group_size {group}: mx.quantize supports affine group sizes "
                             f"{', '.join(map(str, AFFINE_GROUPS))}", param="q_group_size")
    else:
        fixed_group, fixed_bits = MODE_DEFAULTS[r.mode]
        if bits != fixed_bits:
            raise UsageError(f"q_bits {bits}: {r.mode} quantization requires {fixed_bits} bits "
                             "(mx.quantize)", param="q_bits")
        if group != fixed_group:
            raise UsageError(f"q_group_size {group}: {r.mode} quantization requires group size "
                             f"{fixed_group} (mx.quantize)", param="q_group_size")


@dataclass(frozen=True)
class QuantizationPlan:
    """What convert would write: the tensors, the config, the bytes on disk."""

    recipe: QuantRecipe
    family: str
    verified: bool  # the family's rules are checked against the real converter
    mode: str
    bits: int
    group_size: int
    dtype: str | None  # the safetensors dtype floats are cast to; None: left as they are
    tensors: tuple[TensorInfo, ...]
    config: dict[str, Any]  # the converted config.json's quantization entries
    quantized_modules: int
    float_modules: int  # modules with to_quantized left in float (width, predicate)
    weight_bytes: int  # sum of tensor bytes: the index's total_size
    total_parameters: int  # the index's total_parameters (utils.get_total_parameters)
    bits_per_weight: float  # what convert prints: model bytes * 8 / total parameters
    shards: int
    header_bytes: int  # 8-byte length + JSON header, summed over shards
    header_uncertainty_bytes: int  # the offsets' digits depend on mlx's unordered_map order
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def disk_bytes(self) -> int:
        """The safetensors shards' size on disk (tokenizer and JSON files not included)."""
        return self.weight_bytes + self.header_bytes


def refuse_quantized(config: dict[str, Any], tensors: list[TensorInfo] | tuple[TensorInfo, ...]) -> None:
    """An already-quantized source: convert would quantize only what is left in float and
    record the rest per layer (quantize_model's fine-grained path); size it from its own files."""
    block = config.get("quantization")
    qc = config.get("quantization_config")
    text = config.get("text_config")
    if qc is None and isinstance(text, dict):  # load_model lifts the text model's block
        qc = text.get("quantization_config")
    method = qc.get("quant_method") if isinstance(qc, dict) else None
    packed = next((t.name for t in tensors if t.dtype == "U32" and t.name.endswith(".weight")), None)
    if block is not None or (isinstance(qc, dict) and "bits" in qc and method is None):
        raise UsageError("the model is already MLX-quantized (config.json has a quantization "
                         "block): mlx_lm.convert -q would only quantize the layers left in float; "
                         "size it as it is, without --q-bits", param="q_bits")
    if method == "fp8" and qc.get("scale_fmt") == "ue8m0" and list(
            qc.get("weight_block_size") or ()) == [32, 32]:
        raise UsageError("the model is FP8 with ue8m0 scales over 32x32 blocks, which mlx-lm "
                         "loads as mxfp8 (already quantized): size it as it is, without "
                         "--q-bits", param="q_bits")
    if method is not None and method != "fp8":
        raise UsageError(f"the model is already quantized ({method}): mlx_lm.convert loads it "
                         "quantized; size it as it is, without --q-bits", param="q_bits")
    if packed is not None:
        raise UsageError(f"the model is already quantized ({packed} is packed U32): size it as it "
                         "is, without --q-bits", param="q_bits")


def _module(name: str) -> str:
    return name.rsplit(".", 1)[0]


def _quantizable(path: str, w: TensorInfo, rules: Rules) -> bool:
    """A module with to_quantized: Linear/Embedding (2-D weight), SwitchLinear (stacked
    experts) and DeepSeek's MultiLinear (3-D); not Conv1d, not a norm, not MoEGate."""
    if w.dtype not in FLOAT_DTYPES or any(path.endswith(s) for s in rules.not_quantizable):
        return False
    if len(w.shape) == 2:
        return True
    # 3-D: stacked experts (SwitchLinear, under switch_mlp / switch_glu / experts) and MLA's
    # MultiLinear; never a convolution.
    return len(w.shape) == 3 and "conv" not in path.rsplit(".", 1)[-1]


def _recipe_predicate(recipe: str, group: int | None, paths: list[str], n_layers: int):
    """convert.mixed_quant_predicate_builder: more bits for v_proj and down_proj of the first
    and last eighth and every third layer between, and for lm_head."""
    low, high = RECIPES[recipe]
    down = [p for p in paths if "down_proj" in p]
    if not down:
        raise UsageError(f"quant_predicate {recipe}: the model has no down_proj layers "
                         "(mlx_lm.convert: \"Model does not have expected keys for mixed quant\")",
                         param="quant_predicate")
    parts = down[0].split(".")
    loc = next((i for i, s in enumerate(parts) if s.isdigit()), len(parts) - 1)

    def predicate(path: str) -> dict[str, Any]:
        seg = path.split(".")
        if len(seg) > loc:
            if not seg[loc].isdigit():
                raise ConfigError(f"quant_predicate {recipe}: {path} has no layer index where "
                                  "mlx-lm's recipe reads one (convert would fail)")
            index = int(seg[loc])
        else:
            index = 0
        more = (index < n_layers // 8 or index >= 7 * n_layers // 8
                or (index - n_layers // 8) % 3 == 2)
        if ("v_proj" in path or "v_a_proj" in path or "v_b_proj" in path) and more:
            return {"group_size": group, "bits": high, "mode": "affine"}
        if "down_proj" in path and more:
            return {"group_size": group, "bits": high, "mode": "affine"}
        if "lm_head" in path:
            return {"group_size": group, "bits": high, "mode": "affine"}
        return {"group_size": group, "bits": low, "mode": "affine"}

    return predicate


def _packed(path: str, w: TensorInfo, bits: int, group: int, mode: str) -> list[TensorInfo]:
    """mx.quantize: uint32 words of 32/bits weights; scales per group (affine in the weight's
    dtype with biases, the fp modes uint8 without)."""
    *lead, last = w.shape
    if last % group:
        raise ConfigError(f"{path}: last dim {last} is not a multiple of group size {group} "
                          "(mx.quantize would fail)")
    out = [TensorInfo.of(path + ".weight", "U32", (*lead, last * bits // 32))]
    scale_dtype = w.dtype if mode == "affine" else "U8"
    out.append(TensorInfo.of(path + ".scales", scale_dtype, (*lead, last // group)))
    if mode == "affine":
        out.append(TensorInfo.of(path + ".biases", scale_dtype, (*lead, last // group)))
    return out


def convert_dtype(recipe: QuantRecipe, config: dict[str, Any]) -> str | None:
    """--dtype, else config.json's torch_dtype, else text_config.dtype; only float16,
    bfloat16 and float32 cast (convert.py)."""
    d = recipe.dtype or config.get("torch_dtype")
    if d is None and isinstance(config.get("text_config"), dict):
        d = config["text_config"].get("dtype")
    return CONVERT_DTYPES.get(d) if isinstance(d, str) else None


def _n_layers(paths: list[str]) -> int:
    """len(model.layers): the distinct indices after the first "layers" segment."""
    seen: set[int] = set()
    for p in paths:
        seg = p.split(".")
        for i, s in enumerate(seg[:-1]):
            if s == "layers" and seg[i + 1].isdigit():
                seen.add(int(seg[i + 1]))
                break
    return max(seen) + 1 if seen else 0


def plan_conversion(tensors: list[TensorInfo] | tuple[TensorInfo, ...], config: dict[str, Any],
                    family: str, recipe: QuantRecipe) -> QuantizationPlan:
    """The tensors, config entries and bytes ``mlx_lm.convert -q`` writes for this checkpoint."""
    check_recipe(recipe)
    if recipe.quantize:
        refuse_quantized(config, tensors)
        if family in QUANTIZE_FAILS:
            raise UsageError(f"mlx_lm.convert -q fails for {family}: {QUANTIZE_FAILS[family]}; "
                             "only --dtype conversions run", param="q_bits")
    group, bits = resolved(recipe)
    mode = recipe.mode
    ts, rules = sanitized(tensors, config, family)
    dtype = convert_dtype(recipe, config)
    if dtype is not None:
        ts = {k: (TensorInfo.of(k, dtype, v.shape) if v.dtype in FLOAT_DTYPES
                  and not any(s in k for s in rules.keep_dtype) else v) for k, v in ts.items()}

    weights = {_module(k): v for k, v in ts.items() if k.endswith(".weight")}
    candidates = ([p for p, w in weights.items() if _quantizable(p, w, rules)
                   and not (rules.skip is not None and rules.skip(p, config))]
                  if recipe.quantize else [])
    family_pred = rules.family_predicate(config)
    recipe_pred = (_recipe_predicate(recipe.predicate, recipe.group_size, candidates,
                                     _n_layers(list(ts)))
                   if recipe.predicate else None)

    qblock: dict[str, Any] = {"group_size": group, "bits": bits, "mode": mode}
    layer_params: dict[str, dict[str, Any]] = {}
    for p in candidates:
        if weights[p].shape[-1] % group:
            continue  # wrapped_predicate: not quantized, left in float
        if recipe_pred is not None:
            params: dict[str, Any] = recipe_pred(p)
        else:
            params = next((dict(v) for s, v in family_pred.items() if p.endswith(s)), {})
            if params:
                qblock[p] = dict(params)
        if recipe_pred is not None:
            qblock[p] = dict(params)
        layer_params[p] = params

    out: list[TensorInfo] = []
    done: set[str] = set()
    for k, v in ts.items():
        p = _module(k)
        if p in layer_params and k.endswith(".weight"):
            params = layer_params[p]
            m = params.get("mode", "affine") if params else mode
            # to_quantized(**params): a missing key takes the mode's default, not the run's
            d_group, d_bits = MODE_DEFAULTS[m]
            b = params.get("bits") or d_bits if params else bits
            g = params.get("group_size") or d_group if params else group
            out.extend(_packed(p, v, b, g, m))
            done.add(p)
        else:
            out.append(v)
    n_params = _leaf_parameters(ts)
    weight_bytes = sum(t.nbytes for t in out)
    header, spread, shards = _headers(out)
    generic = (f"{family}: mlx-lm's sanitize for this family is approximated by generic rules "
               "(rotary buffers and towers dropped, experts stacked); not checked against mlx-lm")
    notes = () if rules.verified else (generic,)
    return QuantizationPlan(
        recipe=recipe, family=family, verified=rules.verified, mode=mode, bits=bits,
        group_size=group, dtype=dtype, tensors=tuple(out),
        config={"quantization": qblock, "quantization_config": qblock} if recipe.quantize else {},
        quantized_modules=len(done), float_modules=len(candidates) - len(done),
        weight_bytes=weight_bytes, total_parameters=n_params,
        bits_per_weight=weight_bytes * 8 / n_params if n_params else 0.0,
        shards=shards, header_bytes=header, header_uncertainty_bytes=spread, notes=notes)


def _leaf_parameters(ts: Tensors) -> int:
    """utils.get_total_parameters: parameters of leaf modules only (a quantized weight counts
    its logical size), so a Mamba mixer's own A_log, D and dt_bias, held next to its child
    modules, are not counted."""
    modules = {_module(k) for k in ts}
    inner = {m.rsplit(".", i)[0] for m in modules for i in range(1, m.count(".") + 1)}
    return sum(_count(v.shape) for k, v in ts.items() if _module(k) not in inner)


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _module_order(t: TensorInfo) -> tuple:
    """Close to mlx-lm's parameter order (tree_flatten of the module tree, which save_model
    shards in): layers by number, not by text, and the output head after the model."""
    seg = t.name.split(".")
    head = 1 if seg[0] in ("lm_head", "output") else 0
    return (head, *[(0, int(s), "") if s.isdigit() else (1, 0, s) for s in seg])


def _digits(n: int) -> int:
    return len(str(n))


def _headers(tensors: list[TensorInfo]) -> tuple[int, int, int]:
    """(8-byte lengths + JSON headers, their uncertainty, shard count) as save_model writes
    them: shards of at most 5 GiB in parameter order; each header is the compact JSON
    mx.save_safetensors dumps, keys sorted. Only the data_offsets' digits depend on the order
    mlx lays the tensors out in (an unordered_map): counted here in key order, with the
    largest possible deviation either way."""
    shards: list[list[TensorInfo]] = []
    size = 0
    for t in sorted(tensors, key=_module_order):
        if not shards or size + t.nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    total = spread = 0
    for shard in shards:
        doc: dict[str, Any] = {"__metadata__": HEADER_METADATA}
        lo = hi = est = 0
        offset = 0
        shard_total = sum(t.nbytes for t in shard)
        for t in sorted(shard, key=lambda t: t.name):
            doc[t.name] = {"data_offsets": [offset, offset + t.nbytes], "dtype": t.dtype,
                           "shape": list(t.shape)}
            est += _digits(offset) + _digits(offset + t.nbytes)
            lo += 1 + _digits(t.nbytes)
            hi += _digits(shard_total - t.nbytes) + _digits(shard_total)
            offset += t.nbytes
        text = json.dumps(dict(sorted(doc.items())), separators=(",", ":"))
        total += 8 + len(text.encode())
        spread += max(est - lo, hi - est)
    return total, spread, len(shards)


@dataclass(frozen=True)
class ConversionPlan:
    """The conversion sized (--q-bits, --q-mode, ...): what ``mlx_lm.convert`` with these flags
    would write. The JSON reports give it as "quantization_plan"
    (render.conversion_to_json)."""

    label: str  # "4bit", "mixed_3_6", "mxfp4", "bf16"
    command: str  # the mlx_lm.convert command line
    family: str  # mlx-lm's model module whose rules were followed
    family_rules_verified: bool
    quantize: bool
    mode: str | None  # None for a --dtype-only conversion, as bits and group_size
    bits: int | None
    group_size: int | None
    quant_predicate: str | None
    dtype: str | None  # mlx's dtype name ("bfloat16"), None when the checkpoint's is kept
    quantized_modules: int
    float_modules: int
    weight_bytes: int
    disk_bytes: int
    disk_bytes_uncertainty: int
    shards: int
    n_tensors: int
    total_parameters: int
    bits_per_weight: float  # rounded to 4 decimals
    config_quantization: dict[str, Any] | None  # the config.json "quantization" block written


__all__ = ["ConversionPlan", "QuantRecipe", "QuantizationPlan", "Tensors", "check_recipe",
           "plan_conversion"]
