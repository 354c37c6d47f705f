"""Serving budgets and the single-buffer check.

What ``mlx_lm.server`` (continuous batching, a prompt cache) and speculative decoding
(``--draft-model``) add to one generation's memory, as named terms the core adds to the total
(``solve.ExtraTerms``), and the arrays that must each fit in one Metal buffer
(``maxBufferLength``). Pure functions of (ModelConfig, Run, calibration, Serving); every byte is
built from memory.py's public terms, so a serving total and a plain fit agree term by term.

Facts from mlx-lm 0.32 (mlx_lm/server.py, generate.py, models/cache.py):
- The server batches requests (``BatchGenerator``) unless a draft model is loaded, ``--kv-bits``
  is set, or one of the model's caches cannot be merged (``ChunkedKVCache``,
  ``QuantizedKVCache``): then it serves one request at a time (``_serve_single``).
- Up to ``--decode-concurrency`` (default 32) sequences decode together; up to
  ``--prompt-concurrency`` (default 8) prompts prefill together, each chunk ``B x step`` tokens.
  A ``BatchKVCache`` pads every sequence to the longest: each holds the whole context. The
  batch's memory and speed are estimate/batched.py's.
- ``LRUPromptCache(--prompt-cache-size)`` (default 10) keeps up to that many distinct prompts'
  caches (main model and draft); a fetch deep-copies the entry, so a running sequence's cache is
  separate from the stored one. ``--prompt-cache-bytes`` is enforced only when a request joins
  a running batch (docs/serving.md), so the cache is sized by the count.
- Speculative decoding prefills the whole prompt through the draft first, then the main model;
  both CLIs pass their own ``--prefill-step-size`` (2048), not ``speculative_generate_step``'s
  function default of 512. ``stream_generate`` drops ``max_kv_size`` when a draft is used. The
  main model's cache must be trimmable (``ArraysCache`` is not: mlx-lm raises).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from mlxfit.calibration.constants import Backend, Calibration
from mlxfit.errors import UsageError
from mlxfit.estimate.batched import BatchedStep, batched_peak_phase, seq_cache_bytes
from mlxfit.estimate.memory import (
    Phase,
    Run,
    Term,
    attn_groups,
    attn_unfused,
    peak_phase,
)
from mlxfit.estimate.serving_summary import ServingSummary
from mlxfit.estimate.solve import ExtraTerms, largest_true, run_at
from mlxfit.mlx_lm_defaults import DEFAULT_KV_GROUP_SIZE, DEFAULT_PREFILL_STEP_SIZE
from mlxfit.model.config import ModelConfig
from mlxfit.model.inputs import Buffer

# mlx_lm.server defaults (server.py argparse) and generate's draft default.
SERVER_PROMPT_CONCURRENCY = 8
SERVER_PROMPT_CACHE_SIZE = 10
NUM_DRAFT_TOKENS = 3


@dataclass(frozen=True)
class DraftModel:
    """A speculative-decoding draft: its config, weights and largest weight arrays."""

    name: str  # as the user gave it (it goes into the printed command line)
    cfg: ModelConfig
    weights_bytes: int
    arrays: tuple[Buffer, ...] = ()


@dataclass(frozen=True)
class Serving:
    """How the model is served. ``parallel`` / ``prompt_cache`` set: an ``mlx_lm.server`` run;
    neither: ``mlx_lm.generate`` (with an optional draft)."""

    parallel: int | None = None
    prompt_cache: int | None = None
    draft: DraftModel | None = None
    # --prompt-cache-bytes for the command line only: the server enforces it on one path alone
    # (docs/serving.md), so the memory is sized by the count (prompt_cache).
    prompt_cache_bytes: int | None = None

    @property
    def server(self) -> bool:
        return self.parallel is not None or self.prompt_cache is not None

    @property
    def sequences(self) -> int:
        return self.parallel or 1

    @property
    def prefill_batch(self) -> int:
        """Prompts prefilled together: min(parallel, --prompt-concurrency default 8)."""
        return min(self.sequences, SERVER_PROMPT_CONCURRENCY)

    @property
    def cached_prompts(self) -> int:
        if self.prompt_cache is not None:
            return self.prompt_cache
        return SERVER_PROMPT_CACHE_SIZE if self.server else 0

    @property
    def active(self) -> bool:
        return self.server or self.draft is not None


# --------------------------------------------------------------------------- validation


def batch_blockers(cfg: ModelConfig, run: Run, serving: Serving) -> list[str]:
    """Why mlx_lm.server would serve one request at a time (empty: it batches)."""
    why = []
    if serving.draft is not None:
        why.append("a draft model is loaded")
    if run.kv_bits is not None:
        why.append("kv_bits is set")
    unmergeable = {a.cache.mlx_lm_class for a, _ in attn_groups(cfg, run)
                   if not a.cache.mergeable}
    why += [f"the model's {name} has no merge()" for name in sorted(unmergeable)]
    return why


def check_serving(parallel: int | None, prompt_cache: int | None) -> None:
    """The serving parameters' ranges, whatever the model (UsageError naming the parameter)."""
    if parallel is not None and not 1 <= parallel <= 4096:
        raise UsageError(f"parallel must be between 1 and 4096, got {parallel}", param="parallel")
    if prompt_cache is not None and not 0 <= prompt_cache <= 100_000:
        raise UsageError(f"prompt_cache must be between 0 and 100000, got {prompt_cache}",
                         param="prompt_cache")


def validate_serving(cfg: ModelConfig, run: Run, serving: Serving) -> tuple[Run, list[str]]:
    """The run mlx-lm would really perform with this serving set-up, and warnings.

    Raises UsageError where mlx-lm cannot do what is asked."""
    warnings: list[str] = []
    check_serving(serving.parallel, serving.prompt_cache)
    if serving.server and run.max_kv_size is not None:
        raise UsageError("max_kv_size: mlx_lm.server has no such flag (parallel and "
                         "prompt_cache size an mlx_lm.server run)", param="max_kv_size",
                         also=("parallel", "prompt_cache"))
    if cfg.own_cache and run.max_kv_size is not None:
        # mlx-lm's make_prompt_cache calls the model's make_cache() and never passes
        # max_kv_size to it (mlx_lm/models/cache.py, 0.32): the flag does nothing here.
        warnings.append(f"--max-kv-size {run.max_kv_size} is ignored by mlx-lm for this model "
                        "(it builds its own caches with make_cache()): sized without it, and "
                        "left out of the mlx_lm command")
        run = replace(run, max_kv_size=None)
    if serving.sequences > 1:
        blockers = batch_blockers(cfg, run, serving)
        if blockers:
            raise UsageError(f"parallel {serving.sequences}: mlx_lm.server serves requests one "
                             f"at a time when {' and '.join(blockers)}", param="parallel",
                             also=("kv_bits",) if run.kv_bits is not None else ())
    d = serving.draft
    if d is not None and serving.server:
        warnings.append("mlx_lm.server with --draft-model serves requests one at a time and "
                        "never applies --prompt-cache-bytes there: only --prompt-cache-size "
                        "bounds the cached prompts (each holds the model's and the draft's "
                        "caches)")
    if d is not None:
        if any(ly.state_kind for ly in cfg.layers):
            raise UsageError("draft_model: speculative decoding needs a trimmable cache and this "
                             "model's linear/SSM/conv layers use ArraysCache (mlx-lm raises "
                             "'Speculative decoding requires a trimmable prompt cache')",
                             param="draft_model")
        if run.max_kv_size is not None:
            warnings.append("--max-kv-size is dropped by mlx-lm with --draft-model "
                            "(stream_generate pops it): sized with full caches")
            run = replace(run, max_kv_size=None)
        if any(a.cache.untrimmable_past_window for a, _ in attn_groups(cfg, run)):
            warnings.append("--draft-model with sliding-window layers: once the context passes "
                            "the window their RotatingKVCache is no longer trimmable and "
                            "mlx-lm's rewind of rejected draft tokens silently does nothing")
        if any(ly.state_kind for ly in d.cfg.layers):
            warnings.append(f"draft {d.name}: its ArraysCache cannot be rewound; mlx-lm skips "
                            "the rewind of rejected tokens")
        if d.cfg.vocab and cfg.vocab and d.cfg.vocab != cfg.vocab:
            warnings.append(f"draft {d.name} has vocab_size {d.cfg.vocab}, the model "
                            f"{cfg.vocab}: mlx-lm warns the tokenizers may not match")
    return run, warnings


# --------------------------------------------------------------------------- terms


def draft_run(run: Run) -> Run:
    """The draft runs the same schedule and KV flags; max_kv_size is dropped by mlx-lm."""
    return replace(run, max_kv_size=None)


def serving_terms(cfg: ModelConfig, run: Run, phase: Phase, be: Backend,
                  serving: Serving) -> tuple[Term, ...]:
    """The named terms serving adds on top of one generation's peak ``phase``."""
    out: list[Term] = []
    n = serving.sequences
    one = seq_cache_bytes(cfg, run)
    if n > 1:
        b = serving.prefill_batch
        out.append(Term(
            "parallel_kv", (n - 1) * one,
            "(parallel - 1) x one sequence's KV cache + state at the context (a BatchKVCache "
            "pads every sequence to the longest)",
            {"parallel": n, "bytes_per_sequence": one}))
        peak = batched_peak_phase(cfg, run, be, n, b)
        out.append(Term(
            "batched_transient",
            max(0, peak.total_over_weights - phase.total_over_weights - (n - 1) * one),
            "the batch's peak (caches + transient) minus one sequence's peak and the other "
            "sequences' caches: decode steps all sequences (growth copy, logits x parallel); "
            "prefill runs min(parallel, --prompt-concurrency) prompts' chunks together "
            "(activations of prompts x chunk tokens, scores and copies x prompts) while the "
            "others hold full caches",
            {"parallel": n, "prefill_batch": b, "batched_peak_phase": peak.name,
             "batched_peak_over_weights": peak.total_over_weights}))
    dkv = 0
    d = serving.draft
    if d is not None:
        drun = draft_run(run)
        dkv = seq_cache_bytes(d.cfg, drun)
        dpeak = peak_phase(d.cfg, drun, be).total_over_weights
        out.append(Term("draft_weights", d.weights_bytes,
                        "the draft model's weights (safetensors headers)", {"draft": d.name}))
        out.append(Term("draft_kv_cache", dkv,
                        "the draft's KV cache + state at the context (same step and KV flags)",
                        {"draft": d.name}))
        out.append(Term(
            "draft_prefill", max(0, dpeak - (phase.total_over_weights + dkv)),
            "the draft prefills the prompt first, alone: its own peak (caches + transient) "
            "beyond the main model's peak + the draft's cache (0 when lower)",
            {"draft_peak_over_weights": dpeak}))
    k = serving.cached_prompts
    if k:
        per = one + dkv
        out.append(Term(
            "prompt_cache", k * per,
            "mlx_lm.server's LRUPromptCache: up to --prompt-cache-size distinct prompts' caches "
            "(model + draft), each up to the context; a running request works on its own copy",
            {"cached_prompts": k, "bytes_per_prompt": per,
             "default": SERVER_PROMPT_CACHE_SIZE if serving.prompt_cache is None else None}))
    return tuple(out)


def extra_terms_fn(cfg: ModelConfig, cal: Calibration, serving: Serving) -> ExtraTerms | None:
    """The callable fit_core adds at every probed context (None when nothing is served)."""
    if not serving.active:
        return None

    def terms(run: Run, phase: Phase) -> tuple[Term, ...]:
        return serving_terms(cfg, run, phase, cal.backend(run.backend), serving)

    return terms


# --------------------------------------------------------------------------- buffers


def run_buffers(cfg: ModelConfig, run: Run, be: Backend, serving: Serving) -> list[Buffer]:
    """The largest arrays a run allocates, one per kind: an unfused attention score matrix of
    the last prefill chunks (MLA: pe_scores and the rebuilt per-head K/V), one layer's cached
    keys, an MLP intermediate of a chunk, the decode logits."""
    s = run.schedule()
    total = s.chunks()[2]
    b = serving.prefill_batch if serving.sequences > 1 else 1
    n_seq = serving.sequences
    act = cfg.act_bytes
    out: list[Buffer] = []
    best_scores: Buffer | None = None
    for n in {total, total - 1}:
        if n < 1:
            continue
        c = s.chunk_size(n)
        # The same rule as memory.prefill_phase: the first chunk never runs quantized.
        quant = s.kv_quantized_during(n, run.kv_bits, run.quantized_kv_start)
        for a, _ in attn_groups(cfg, run):
            if not a.cache.owns_memory:
                continue
            k = s.keys_seen(a, n)
            cands = []
            if a.index is not None:  # deepseek_v41's indexer: one float32 score matrix
                keys = s.index_keys(a, n)
                cands.append((b * a.index.heads * c * keys * 4,
                              (f"indexer scores: {b} x {a.index.heads} heads x {c} queries x "
                               f"{keys} index keys x 4 B (float32)")))
            if attn_unfused(a, run, cfg, a.cache.holds_quantized(quant), c):
                cands.append((b * a.q_heads * c * k * act,
                              (f"attention scores: {b} x {a.q_heads} heads x {c} queries x "
                              f"{k} keys x {act} B (unfused, head_dim {a.head_dim})")))
            if a.mla:
                m = a.mla
                cands.append((b * m.heads * c * k * act,
                              f"MLA pe_scores: {b} x {m.heads} heads x {c} x {k} x {act} B"))
                cands.append((b * m.heads * k * max(m.qk_nope, m.v_head) * act,
                              (f"MLA rebuilt K/V: {b} x {m.heads} heads x {k} keys x "
                              f"{max(m.qk_nope, m.v_head)} x {act} B")))
            for nbytes, what in cands:
                if best_scores is None or nbytes > best_scores.bytes:
                    best_scores = Buffer("attention (prefill)", int(nbytes), what)
    if best_scores is not None:
        out.append(best_scores)
    kv_best: Buffer | None = None
    quant_final = run.kv_quantized
    for a, _ in attn_groups(cfg, run):
        if not a.cache.owns_memory:
            continue
        tok = a.cache.tokens_final(s)
        width = max(a.k_dim, a.v_dim)
        per = (run.kv_bits or 8) / 8 if a.cache.holds_quantized(quant_final) else act
        nbytes = int(n_seq * a.kv_heads * tok * width * per)
        if kv_best is None or nbytes > kv_best.bytes:
            kv_best = Buffer("kv cache (one layer's keys)", nbytes,
                             f"{n_seq} x {a.kv_heads} kv heads x {tok} tokens x {width} "
                             f"x {per:g} B")
    if kv_best is not None:
        out.append(kv_best)
    if total:
        c = s.chunk_size(1)
        width = max(cfg.intermediate, cfg.top_k * max(cfg.moe_intermediate, cfg.hidden))
        out.append(Buffer("mlp intermediate (prefill)", b * c * width * act,
                          f"{b} x {c} tokens x {width} x {act} B"))
    out.append(Buffer("logits (decode)", n_seq * cfg.vocab * 4,
                      f"{n_seq} x vocab {cfg.vocab} x 4 B (float32)"))
    return out


def all_buffers(cfg: ModelConfig, run: Run, cal: Calibration, serving: Serving,
                weight_arrays: tuple[Buffer, ...]) -> tuple[Buffer, ...]:
    """Run arrays, the model's largest weight arrays and the draft's, largest first."""
    be = cal.backend(run.backend)
    bufs = run_buffers(cfg, run, be, serving) + list(weight_arrays)
    if serving.draft is not None:
        d = serving.draft
        bufs += [replace(x, name=f"draft {x.name}") for x in d.arrays]
        bufs += [replace(x, name=f"draft {x.name}")
                 for x in run_buffers(d.cfg, draft_run(run), be, Serving())]
    return tuple(sorted(bufs, key=lambda x: -x.bytes))


def max_context_within_buffer(cfg: ModelConfig, run: Run, cal: Calibration, serving: Serving,
                              weight_arrays: tuple[Buffer, ...], limit: int, hi: int) -> int:
    """The largest context <= hi at which no array exceeds ``limit`` (0 when a weight array
    already does). The run's arrays grow with the context, so a bisection finds it."""
    if any(b.bytes > limit for b in weight_arrays):
        return 0

    def ok(n: int) -> bool:
        return all(b.bytes <= limit for b in all_buffers(cfg, run_at(run, n), cal, serving, ()))

    return largest_true(ok, hi)


def summary(serving: Serving, run: Run, cfg: ModelConfig, command: str,
            batched_decode: BatchedStep | None = None) -> ServingSummary:
    """The serving set-up as the report and JSON show it (no set-up for a plain generate run)."""
    if not serving.active:
        return ServingSummary(command=command, batched_decode=batched_decode)
    return ServingSummary(
        command=command,
        mode="mlx_lm.server" if serving.server else "mlx_lm.generate",
        parallel=serving.sequences,
        prefill_batch=serving.prefill_batch if serving.sequences > 1 else 1,
        prompt_cache=serving.cached_prompts,
        prompt_cache_default=serving.server and serving.prompt_cache is None,
        batched=serving.server and not batch_blockers(cfg, run, serving),
        draft_model=serving.draft.name if serving.draft else None,
        num_draft_tokens=NUM_DRAFT_TOKENS if serving.draft else None,
        prefill_step_size=run.prefill_step_size,
        batched_decode=batched_decode,
    )


def command_line(model: str, run: Run, serving: Serving) -> str:
    """The mlx-lm command realizing a run: flags that differ from mlx-lm's defaults, plus the
    serving set-up. ``mlx_lm.generate`` reads the prompt from stdin (``--prompt -``)."""
    q = shlex.quote
    kv: list[str] = []
    if run.prefill_step_size != DEFAULT_PREFILL_STEP_SIZE:
        kv += ["--prefill-step-size", str(run.prefill_step_size)]
    if run.kv_bits is not None:
        kv += ["--kv-bits", str(run.kv_bits)]
        if run.kv_group_size != DEFAULT_KV_GROUP_SIZE:
            kv += ["--kv-group-size", str(run.kv_group_size)]
        kv += ["--quantized-kv-start", str(run.quantized_kv_start)]
    draft = ["--draft-model", q(serving.draft.name)] if serving.draft is not None else []
    if serving.server:
        n = serving.sequences
        parts = ["mlx_lm.server", "--model", q(model),
                 "--decode-concurrency", str(n),
                 "--prompt-concurrency", str(min(n, SERVER_PROMPT_CONCURRENCY)),
                 "--prompt-cache-size", str(serving.cached_prompts)]
        if serving.prompt_cache_bytes is not None:
            parts += ["--prompt-cache-bytes", str(serving.prompt_cache_bytes)]
        return " ".join(parts + kv + draft)
    parts = ["mlx_lm.generate", "--model", q(model), "--max-tokens", str(max(run.gen, 1))]
    if run.max_kv_size is not None:
        kv += ["--max-kv-size", str(run.max_kv_size)]
    return " ".join(parts + kv + draft + ["--prompt", "-", "<", "prompt.txt"])
