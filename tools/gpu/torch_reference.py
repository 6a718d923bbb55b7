#!/usr/bin/env python3
"""A PyTorch reference for meshsim's cuda backend: the step `validate` runs, as people train it.

`meshsim validate examples/scenarios/gpt3-layer-gpu.yaml` runs on one GPU at TP 1, micro-batch 1:
embedding, ONE transformer layer, final norm, logits, cross-entropy, backward, optimizer step.
This runs that step in PyTorch, the layer written here as plain torch.nn modules, for:

  gpt3    GPT-3 175B's layer, seq 2048: LayerNorm, GeLU (tanh), biases, learned positions, tied
          embeddings, dropout 0.1 (embedding, both residuals, attention probabilities)
  llama3  Llama-3 70B's layer, seq 4096 (--seq-llama; acceptance step 17's): RMSNorm, SwiGLU, 64
          query and 8 KV heads, RoPE (theta 500000), no biases, untied output projection, no dropout

Widths, heads, vocabulary, biases, tying, GeLU/SwiGLU, the norm and the positions are meshsim's
presets (schedule/model.cpp; the test checks them); dropout, which meshsim's ModelSpec lacks, is
the published models'. meshsim's own step runs a 0.1 dropout-add for both; since the twenty-fourth
session it runs the Llama layer with RMSNorm and RoPE, as the presets now say (GPT-3: LayerNorm and
learned positions, which add no kernel to the layer).

Recipe: PyTorch's usual mixed precision (AMP): fp32 parameters (the master weights), the step under
torch.autocast(bfloat16) (GEMMs and attention in bf16; norms, softmax, loss in fp32), gradients
clipped at 1.0 (foreach), torch.optim.AdamW(fused=True), zero_grad(set_to_none=True). Attention:
F.scaled_dot_product_attention, causal; grouped-query heads by enable_gqa=True where this torch has
it, else K/V repeat_interleave'd (--gqa-expand forces that; reported). Modes: eager, and compiled
(torch.compile of the model, default mode; the optimizer eager). Seeded weights, tokens and masks.

Per model and mode: --warmup steps (compilation happens there), --steps timed with CUDA events
(median, min), then one step under torch.profiler (CUDA activity): each kernel's name and time,
its meshsim op kind by name (classify_kernel), GPU busy time against the step (the rest: host and
launch overhead) and launches. First, SDPA forward + backward alone at both attention shapes,
causal and not, default and each backend forced, in TFLOP/s by meshsim's FLOP convention.

    python3 tools/gpu/torch_reference.py --json res/torch-reference.json --trace-dir res
    python3 tools/gpu/torch_reference.py --compare res/torch-reference.json \\
        --ours gpt3=res/validate-tp1.json --ours llama3=res/validate-llama.json   # markdown

Last line: `torch_reference: measured ...` (exit 0) or `torch_reference: NOT all measured ...`
(exit 1; an out-of-memory or failed compile is reported and the rest runs). Exit 77 (skip) without
PyTorch or a CUDA device, 2 on a bad argument. What needs no torch imports none.
"""
import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

# --- What runs: meshsim's presets (schedule/model.cpp) and the published models' rest -------------
MODELS = {
    "gpt3": dict(preset="gpt3-175b", hidden=12288, heads=96, kv_heads=96, ffn=49152, vocab=51200, seq=2048,
                 ffn_kind="gelu", bias=True, tied=True, norm="layernorm", positions="learned", dropout=0.1),
    "llama3": dict(preset="llama3-70b", hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256, seq=4096,
                   ffn_kind="swiglu", bias=False, tied=False, norm="rmsnorm", positions="rope", dropout=0.0),
}
MODES = ("eager", "compiled")
KINDS = ("gemm", "attention", "norm", "elementwise", "softmax", "optimizer", "memcpy", "other")
ROPE_THETA = 500000.0  # Llama 3
MESHSIM_DIFFERS = {
    "gpt3": "meshsim runs attention unfused (scores GEMM, softmax, dropout, PV GEMM), PyTorch through SDPA",
    "llama3": "meshsim runs a 0.1 dropout-add on both residuals (Llama has no dropout)",
}


def attention_flops(batch_heads, seq_q, seq_kv, head_dim, causal, backward=False):
    """meshsim's Kernel::attention (schedule/kernel.h): forward 4*BH*Sq*Skv*D, halved when
    causal; the backward pass 2.5x the forward."""
    f = 4.0 * batch_heads * seq_q * seq_kv * head_dim * (0.5 if causal else 1.0)
    return 2.5 * f if backward else f


def step_model_flops(m, seq, batch=1):
    """meshsim's model_flops_per_iteration for a one-layer model (schedule/model.cpp): 3 x (the
    layer's forward GEMM FLOPs, attention's s^2 counted whole + the logits')."""
    h, f, hkv = m["hidden"], m["ffn"], m["kv_heads"] * (m["hidden"] // m["heads"])
    b, s = batch, seq
    mlp = (6 if m["ffn_kind"] == "swiglu" else 4) * b * s * h * f
    layer = 2 * b * s * h * (h + 2 * hkv) + 2 * (2 * b * s * s * h) + 2 * b * s * h * h + mlp
    return 3 * (layer + 2 * b * s * h * m["vocab"])


# --- Kernel names -> meshsim's op kinds ----------------------------------------------------------
def _any(name, patterns):
    return any(p in name for p in patterns)


def _triton_kind(n):
    """Inductor names a kernel triton_{poi,red,per,tem,for}_fused_<aten ops>_<index>; a fused
    kernel counts whole under the first kind its ops name (attention, gemm, softmax, norm,
    optimizer, embedding gather = memcpy), else elementwise."""
    ops = n.split("_fused_", 1)[1] if "_fused_" in n else n
    if _any(ops, ("flash", "attention", "sdpa")):
        return "attention"
    if n.startswith("triton_tem_"):  # a template kernel: inductor's own GEMM
        return "gemm"
    if _any(ops, ("softmax", "nll_loss", "cross_entropy", "logsumexp")):
        return "softmax"
    if _any(ops, ("layer_norm", "rms_norm", "rsqrt", "var_mean")):
        return "norm"
    if _any(ops, ("adam", "foreach")):
        return "optimizer"
    if "embedding" in ops and "backward" not in ops:
        return "memcpy"
    return "elementwise"


def classify_kernel(name):
    """meshsim's op kind of a GPU kernel, from its name as torch.profiler reports it.

    Order matters: flash/cuDNN attention kernels carry `cutlass` in their template arguments,
    so attention is matched before GEMMs; LpNormFunctor (clip_grad_norm_) is the optimizer's,
    before the norms. Cross-entropy (log_softmax, nll_loss) is `softmax`, as meshsim counts
    its cross_entropy op; the embedding's row gather is `memcpy` and its backward
    `elementwise`, as meshsim's embedding ops (schedule/plan.cpp). Unknown names: `other`."""
    n = name.lower()
    if n.startswith(("memcpy", "memset")):
        return "memcpy"
    if n.startswith("triton_"):
        return _triton_kind(n)
    if _any(n, ("flash", "fmha", "sdpa", "attention", "attn")):
        return "attention"
    if _any(n, ("gemm", "nvjet", "cublas", "cutlass", "gemv", "xmma")):
        return "gemm"
    if _any(n, ("adam", "multi_tensor_apply", "lpnorm", "foreach")):
        return "optimizer"
    if _any(n, ("norm", "gammabeta", "rowwisemoments", "welford")):
        return "norm"
    if _any(n, ("softmax", "nll_loss", "cross_entropy", "logsumexp")):
        return "softmax"
    if _any(n, ("indexselect", "index_select", "fillfunctor")):
        return "memcpy"
    if _any(n, ("elementwise", "dropout", "gelu", "silu", "reduce", "embedding", "radix", "scan", "cub::",
                "catarray", "index", "scatter", "gather", "copy", "at::native")):
        return "elementwise"
    return "other"


def sdpa_backend(names):
    """Which SDPA backend ran, from the kernel names of one call: cudnn, flash, efficient,
    math (GEMMs and a softmax, no fused kernel), or unknown."""
    low = [n.lower() for n in names]
    if any("cudnn" in n and _any(n, ("sdpa", "fprop", "bprop", "flash")) for n in low):
        return "cudnn"
    if any(_any(n, ("fmha", "memeffattention", "mem_eff", "efficient_attention")) for n in low):
        return "efficient"
    if any("flash" in n for n in low):
        return "flash"
    kinds = {classify_kernel(n) for n in names}
    return "math" if {"gemm", "softmax"} <= kinds else "unknown"


def gpu_records(trace):
    """The GPU activity of a torch.profiler Chrome trace (dict or its traceEvents): kernels,
    memcpys and memsets as {name, ts, dur (microseconds), cat}, in start order."""
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    cats = ("kernel", "gpu_memcpy", "gpu_memset")
    out = [dict(name=e["name"], ts=float(e["ts"]), dur=float(e.get("dur", 0)), cat=e["cat"].lower())
           for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in cats]
    return sorted(out, key=lambda r: r["ts"])


def summarize_kernels(records, step_ms=None):
    """Per kind: ms and kernel count; kernel time summed, GPU busy time (the union of the
    intervals), first-start-to-last-end span, kernel launches; with the step's time, the
    idle part (host and launch overhead); and every kernel (name, ms, kind) in order."""
    kinds = {k: {"ms": 0.0, "kernels": 0} for k in KINDS}
    kernels, busy, end = [], 0.0, None
    for r in sorted(records, key=lambda r: r["ts"]):
        kind = classify_kernel(r["name"])
        kinds[kind]["ms"] += r["dur"] / 1e3
        kinds[kind]["kernels"] += 1
        kernels.append({"name": r["name"], "ms": r["dur"] / 1e3, "kind": kind})
        start, stop = r["ts"], r["ts"] + r["dur"]
        if end is None or start >= end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    out = {"kinds": kinds, "kernel_ms": sum(k["ms"] for k in kernels), "busy_ms": busy / 1e3,
           "span_ms": (max(r["ts"] + r["dur"] for r in records) - min(r["ts"] for r in records)) / 1e3
           if records else 0.0,
           "launches": sum(1 for r in records if r["cat"] == "kernel"),
           "copies": sum(1 for r in records if r["cat"] != "kernel")}
    if step_ms:
        out.update(step_ms=step_ms, idle_ms=step_ms - out["busy_ms"], busy_fraction=out["busy_ms"] / step_ms)
    out["kernels"] = kernels
    return out


# --- Text and markdown from the results (no torch) -----------------------------------------------
def _f(x, fmt="{:.2f}"):
    return "-" if x is None else fmt.format(x)


def _table(header, rows):
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header)] + [line(r) for r in rows])


def format_summary(result):
    """The human summary: steps per model and mode, kinds per profiled step, SDPA cases."""
    out, rows, kind_blocks, not_run = [], [], [], []
    for key, m in result.get("models", {}).items():
        for mode, r in m.get("modes", {}).items():
            if r.get("status") != "measured":
                not_run.append(f"{key} {mode}: {r.get('status')}: {r.get('reason', '?')}")
                continue
            p = r.get("profile") or {}
            if r.get("profile_note"):
                not_run.append(f"{key} {mode}: {r['profile_note']}")
            rows.append([f"{key} {mode}", _f(r["median_ms"]), _f(r["min_ms"]), _f(r.get("model_tflops"), "{:.0f}"),
                         _f(p.get("busy_ms")), _f(p.get("idle_ms")), p.get("launches", "-"),
                         _f(r.get("first_step_s"), "{:.1f}"), r.get("sdpa_backend", "-")])
            if p:
                krows = [[k, _f(v["ms"]), v["kernels"]] for k, v in p["kinds"].items() if v["kernels"]]
                kind_blocks.append(f"{key} {mode}, one profiled step by op kind:\n"
                                   + _table(["kind", "ms", "kernels"], krows))
    if rows:
        out.append(_table(["step", "median ms", "min ms", "TFLOP/s", "GPU busy ms", "idle ms", "kernels",
                           "1st step s", "SDPA"], rows))
    out += ["\n".join(not_run)] if not_run else []
    out += kind_blocks
    cases = result.get("attention", {}).get("cases", [])
    if cases:
        arows = [[c["case"], "causal" if c["causal"] else "full", c["requested"], c.get("backend", "-"),
                  _f(c.get("fwd_ms"), "{:.3f}"), _f(c.get("fwd_bwd_ms"), "{:.3f}"),
                  _f(c.get("fwd_bwd_tflops"), "{:.0f}"), c.get("reason", "")[:60]] for c in cases]
        out.append("SDPA forward + backward (TFLOP/s by meshsim's convention: bwd = 2.5 x fwd):\n" + _table(
            ["shape", "mask", "asked", "ran", "fwd ms", "fwd+bwd ms", "TFLOP/s", "not run because"], arows))
    return "\n\n".join(out)


def status_line(result):
    """The last line acceptance.sh reads."""
    done, missing = [], []
    for key, m in result.get("models", {}).items():
        for mode, r in m.get("modes", {}).items():
            if r.get("status") == "measured":
                done.append(f"{key} {mode} {r['median_ms']:.1f} ms")
            else:
                missing.append(f"{key} {mode} ({r.get('reason', '?')[:80]})")
    for c in result.get("attention", {}).get("cases", []):
        if c["requested"] == "default" and c.get("fwd_bwd_ms") is None:
            missing.append(f"SDPA {c['case']} ({c.get('reason', '?')[:80]})")
    if result.get("attention", {}).get("error"):
        missing.append(f"SDPA ({result['attention']['error'][:80]})")
    att = [c for c in result.get("attention", {}).get("cases", [])
           if c["requested"] == "default" and c["causal"] and c.get("fwd_bwd_ms") is not None]
    done += [f"SDPA {c['case']} causal fwd+bwd {c['fwd_bwd_ms']:.2f} ms ({c['backend']})" for c in att]
    if missing:
        return "torch_reference: NOT all measured: " + "; ".join(missing) + ("; measured " + ", ".join(done)
                                                                            if done else "")
    return "torch_reference: measured " + ", ".join(done) if done else "torch_reference: NOT measured: nothing ran"


def load_json_result(path):
    """The first JSON object in a file (validate's output may have log lines after it)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if "{" not in text:
        raise ValueError(f"{path}: no JSON object")
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def compare_markdown(ref, ours):
    """acceptance.md's side-by-side: our measured step (validate --json, per model in `ours`:
    a dict, or a string saying why there is none) beside PyTorch eager and compiled, per op
    kind, and attention forward + backward against SDPA at the Llama-3 70B shape."""
    env = ref.get("environment", {})
    out = ["## PyTorch beside our cuda backend (tools/gpu/torch_reference.py)", "",
           f"PyTorch {env.get('torch', '?')}, CUDA {env.get('cuda', '?')}, cuDNN {env.get('cudnn', '?')}, "
           f"{env.get('gpu', '?')}. Ours: validate's measured iteration (step 6: GPT-3, step 17: Llama-3). "
           "PyTorch: the median step (AMP bf16, fused AdamW, SDPA); per op kind, ours sums each op's time, "
           "PyTorch the kernels of one profiled step by kernel name. Issue 34's bound: ours <= 1.1 x eager.", "",
           "| model | ours ms | eager ms | compiled ms | ours / eager | ours / compiled | <= 1.1 x eager |",
           "|---|---|---|---|---|---|---|"]
    models = ref.get("models", {})

    def ms(key, mode):
        r = models.get(key, {}).get("modes", {}).get(mode, {})
        return r.get("median_ms") if r.get("status") == "measured" else None

    blocks = []
    for key in MODELS:
        if key not in models and key not in ours:
            continue
        o = ours.get(key)
        mine = 1e3 * o["measured_iteration_s"] if isinstance(o, dict) and "measured_iteration_s" in o else None
        e, c = ms(key, "eager"), ms(key, "compiled")
        ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
        bound = "-" if not (mine and e) else ("yes" if mine <= 1.1 * e else "NO")
        why = "" if mine or not isinstance(o, str) else f" (ours: {o})"
        out.append(f"| {key} ({models.get(key, {}).get('preset', MODELS[key]['preset'])}, seq "
                   f"{models.get(key, {}).get('seq', MODELS[key]['seq'])}){why} | {_f(mine)} | {_f(e)} | {_f(c)} | "
                   f"{ratio(mine, e)} | {ratio(mine, c)} | {bound} |")
        ok = {k["kind"]: k for k in (o.get("kinds", []) if isinstance(o, dict) else [])}
        prof = {m: (models.get(key, {}).get("modes", {}).get(m, {}).get("profile") or {}) for m in MODES}
        rows = [f"### {key}: per op kind (ms, and ops or kernels)", "",
                "| kind | ours | eager | compiled |", "|---|---|---|---|"]
        for kind in KINDS:
            cells = [f"{1e3 * ok[kind]['measured_s']:.2f} ({ok[kind]['ops']})" if kind in ok else "-"]
            for m in MODES:
                k = prof[m].get("kinds", {}).get(kind)
                cells.append(f"{k['ms']:.2f} ({k['kernels']})" if k and k["kernels"] else "-")
            if cells != ["-", "-", "-"]:
                rows.append(f"| {kind} | " + " | ".join(cells) + " |")
        rows.append("| GPU busy / step | - | " + " | ".join(
            f"{prof[m]['busy_ms']:.2f} / {prof[m]['step_ms']:.2f}" if prof[m].get("step_ms") else "-"
            for m in MODES) + " |")
        if key in MESHSIM_DIFFERS:
            rows += ["", f"Not the same work everywhere: {MESHSIM_DIFFERS[key]}."]
        blocks.append("\n".join(rows))
    out += [""] + [b + "\n" for b in blocks]

    sdpa = [c for c in ref.get("attention", {}).get("cases", [])
            if c["case"].startswith("llama3") and c["causal"] and c.get("fwd_bwd_ms") is not None]
    seq = models.get("llama3", {}).get("seq", MODELS["llama3"]["seq"])
    shape = dict(MODELS["llama3"], seq=sdpa[0].get("seq", seq) if sdpa else seq)
    o = ours.get("llama3")
    att = next((k for k in (o.get("kinds", []) if isinstance(o, dict) else []) if k["kind"] == "attention"), None)
    flops = attention_flops(shape["heads"], shape["seq"], shape["seq"], shape["hidden"] // shape["heads"], True, True)
    flops += attention_flops(shape["heads"], shape["seq"], shape["seq"], shape["hidden"] // shape["heads"], True)
    best = min((c["fwd_bwd_ms"] for c in sdpa), default=None)
    out += [f"### Attention forward + backward, Llama-3 70B shape ({shape['heads']} heads, {shape['kv_heads']} KV "
            f"heads, seq {shape['seq']}, head dim 128, causal; {flops / 1e12:.3f} TFLOP by meshsim's convention)", "",
            "| what | ms | TFLOP/s | of the fastest SDPA's throughput |", "|---|---|---|---|"]
    if att:
        mine = 1e3 * att["measured_s"]
        out.append(f"| ours (validate's attention row, {att['ops']} ops) | {mine:.3f} | {flops / mine / 1e9:.0f} | "
                   f"{_f(best / mine if best else None)} |")
    else:
        out.append("| ours | - | - | no attention row in validate's result |")
    for c in sdpa:
        out.append(f"| SDPA {c['case']}, {c['requested']} ({c['backend']}) | {c['fwd_bwd_ms']:.3f} | "
                   f"{flops / c['fwd_bwd_ms'] / 1e9:.0f} | {best / c['fwd_bwd_ms']:.2f} |")
    if not sdpa:
        out.append("| SDPA | - | - | not measured |")
    return "\n".join(out) + "\n"


# --- The PyTorch side -----------------------------------------------------------------------------
def build_model(torch, m, seq, gqa_native):
    """The model of one step: embedding, one pre-norm layer, final norm, logits, loss."""
    nn, F = torch.nn, torch.nn.functional
    h, heads, kv, d = m["hidden"], m["heads"], m["kv_heads"], m["hidden"] // m["heads"]
    p = m["dropout"]
    drop = (lambda t, on: F.dropout(t, p, on)) if p > 0 else (lambda t, on: t)  # noqa: E731

    class RMSNorm(nn.Module):  # where torch has no nn.RMSNorm (before 2.4)
        def __init__(self, width, eps=1e-5):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def norm():
        if m["norm"] == "layernorm":
            return nn.LayerNorm(h)
        return nn.RMSNorm(h, eps=1e-5) if hasattr(nn, "RMSNorm") else RMSNorm(h)

    def rope(x, cos, sin):  # rotate-half RoPE on [b, heads, s, d]
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = norm(), norm()
            self.qkv = nn.Linear(h, h + 2 * kv * d, bias=m["bias"])
            self.proj = nn.Linear(h, h, bias=m["bias"])
            self.fc1 = nn.Linear(h, 2 * m["ffn"] if m["ffn_kind"] == "swiglu" else m["ffn"], bias=m["bias"])
            self.fc2 = nn.Linear(m["ffn"], h, bias=m["bias"])

        def forward(self, x, cos, sin):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split([h, kv * d, kv * d], dim=-1)
            q, k, v = (t.view(b, s, -1, d).transpose(1, 2) for t in (q, k, v))
            if cos is not None:
                q, k = rope(q, cos, sin), rope(k, cos, sin)
            extra = {}
            if kv < heads and gqa_native:
                extra["enable_gqa"] = True
            elif kv < heads:
                k, v = k.repeat_interleave(heads // kv, dim=1), v.repeat_interleave(heads // kv, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=p if self.training else 0.0, is_causal=True,
                                               **extra)
            x = x + drop(self.proj(a.transpose(1, 2).reshape(b, s, h)), self.training)
            y = self.fc1(self.ln2(x))
            if m["ffn_kind"] == "swiglu":
                gate, up = y.chunk(2, dim=-1)
                y = F.silu(gate) * up
            else:
                y = F.gelu(y, approximate="tanh")
            return x + drop(self.fc2(y), self.training)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(m["vocab"], h)
            self.pos = nn.Embedding(seq, h) if m["positions"] == "learned" else None
            self.layer, self.norm = Layer(), norm()
            self.head = None if m["tied"] else nn.Linear(h, m["vocab"], bias=False)
            if m["positions"] == "rope":
                inv = 1.0 / ROPE_THETA ** (torch.arange(0, d, 2, dtype=torch.float32) / d)
                ang = torch.outer(torch.arange(seq, dtype=torch.float32), inv).repeat(1, 2)
                self.register_buffer("cos", ang.cos().to(torch.bfloat16), persistent=False)
                self.register_buffer("sin", ang.sin().to(torch.bfloat16), persistent=False)
            else:
                self.cos = self.sin = None
            for mod in self.modules():
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(mod.weight, std=0.02)
                if isinstance(mod, nn.Linear) and mod.bias is not None:
                    nn.init.zeros_(mod.bias)

        def forward(self, tokens, targets):
            x = self.tok(tokens)
            if self.pos is not None:
                x = x + self.pos.weight[: tokens.shape[1]]
            x = self.layer(drop(x, self.training), self.cos, self.sin)
            logits = F.linear(self.norm(x), self.tok.weight if self.head is None else self.head.weight)
            return F.cross_entropy(logits.view(-1, m["vocab"]), targets.view(-1))

    return Model()


def first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]


def profile_kernels(torch, fn, trace_path=None):
    """The GPU records of one call of fn() under torch.profiler (CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile  # pylint: disable=import-outside-toplevel
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    if trace_path:
        path = trace_path
    else:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
    prof.export_chrome_trace(path)
    try:
        with open(path, encoding="utf-8") as f:
            return gpu_records(json.load(f))
    finally:
        if not trace_path:
            os.remove(path)


def run_model(torch, key, mode, a, gqa_native):
    """One model in one mode: warm-up, timed steps, a profiled step."""
    m = MODELS[key]
    seq = a.seq_llama if key == "llama3" else m["seq"]
    torch.manual_seed(a.seed)
    with torch.device("cuda"):
        model = build_model(torch, m, seq, gqa_native)
    model.train()
    gen = torch.Generator(device="cuda").manual_seed(a.seed + 1)
    tokens = torch.randint(0, m["vocab"], (1, seq), device="cuda", generator=gen)
    targets = torch.randint(0, m["vocab"], (1, seq), device="cuda", generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    params = list(model.parameters())
    run = torch.compile(model) if mode == "compiled" else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = run(tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        opt.step()
        return loss

    def timed():
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        loss = step()
        t1.record()
        t1.synchronize()
        return t0.elapsed_time(t1), loss

    torch.cuda.reset_peak_memory_stats()
    warm = []
    for _ in range(a.warmup):
        w0 = time.perf_counter()
        _, loss = timed()
        warm.append(time.perf_counter() - w0)
        if len(warm) == 1:
            first_loss = loss.item()
    times = [timed()[0] for _ in range(a.steps)]
    last_loss = step().item()
    torch.cuda.synchronize()
    med = statistics.median(times)
    r = {"status": "measured", "seq": seq, "step_ms": times, "median_ms": med, "min_ms": min(times),
         "model_tflops": step_model_flops(m, seq) / med / 1e9, "warmup_s": warm, "first_step_s": warm[0],
         "loss_first": first_loss, "loss_last": last_loss, "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
         "gqa": "n/a" if m["kv_heads"] == m["heads"] else ("enable_gqa" if gqa_native else "repeat_interleave")}
    if not all(x == x and abs(x) < 1e4 for x in (first_loss, last_loss)):
        r.update(status="failed", reason=f"loss not finite ({first_loss}, {last_loss})")
    if not a.no_profile:
        trace = os.path.join(a.trace_dir, f"torch-trace-{key}-{mode}.json") if a.trace_dir else None
        try:
            recs = profile_kernels(torch, step, trace)
        except Exception as e:  # pylint: disable=broad-except  (the timings above stand without it)
            recs, r["profile_note"] = [], "profiling failed: " + first_line(e)
        if recs:
            r["profile"] = summarize_kernels(recs, med)
            r["sdpa_backend"] = sdpa_backend([x["name"] for x in recs if classify_kernel(x["name"]) == "attention"])
        else:
            r.setdefault("profile_note", "the profiler's trace holds no GPU activity (no Kineto/CUPTI here?)")
        if trace:
            r["trace"] = os.path.basename(trace)
    return r


def run_attention(torch, a, gqa_native):
    """SDPA forward + backward alone, bf16, batch 1, head dim 128: each shape, causal and not,
    the default choice and each backend forced."""
    F = torch.nn.functional
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # pylint: disable=import-outside-toplevel
        forced = [(n, getattr(SDPBackend, b)) for n, b in
                  (("cudnn", "CUDNN_ATTENTION"), ("flash", "FLASH_ATTENTION"), ("efficient", "EFFICIENT_ATTENTION"))
                  if hasattr(SDPBackend, b)]
    except ImportError:
        forced, sdpa_kernel = [], None
    L = MODELS["llama3"]
    shapes = [("llama3 gqa", L["heads"], L["kv_heads"], a.seq_llama),
              ("llama3 mha", L["heads"], L["heads"], a.seq_llama),  # K/V expanded to 64 heads beforehand
              ("gpt3", MODELS["gpt3"]["heads"], MODELS["gpt3"]["heads"], MODELS["gpt3"]["seq"])]
    if not gqa_native:
        shapes = shapes[1:]
    cases, d = [], 128
    gen = torch.Generator(device="cuda").manual_seed(a.seed + 2)
    for name, hq, hkv, s in shapes:
        q = torch.randn(1, hq, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
        k, v = (torch.randn(1, hkv, s, d, device="cuda", dtype=torch.bfloat16, generator=gen).requires_grad_()
                for _ in range(2))
        dout = torch.randn_like(q)
        extra = {"enable_gqa": True} if hkv < hq else {}
        for causal in (True, False):
            fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, **extra)  # noqa: E731
            both = lambda: torch.autograd.grad(fwd(), (q, k, v), dout)  # noqa: E731
            flops = attention_flops(hq, s, s, d, causal)
            for req, backend in [("default", None)] + forced:
                c = {"case": name, "heads": hq, "kv_heads": hkv, "seq": s, "head_dim": d, "causal": causal,
                     "requested": req, "fwd_flops": flops}
                ctx = sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")  # SDPA says why it refuses a backend in warnings
                    try:
                        ms = {}
                        with ctx:
                            for label, fn in (("fwd_ms", fwd), ("fwd_bwd_ms", both)):
                                for _ in range(3):
                                    fn()
                                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                                t0.record()
                                for _ in range(a.steps):
                                    fn()
                                t1.record()
                                t1.synchronize()
                                ms[label] = t0.elapsed_time(t1) / a.steps
                            ran = req
                            if req == "default":
                                try:
                                    ran = sdpa_backend([x["name"] for x in profile_kernels(torch, both)])
                                except Exception as e:  # pylint: disable=broad-except
                                    ran = "unknown (profiling failed: " + first_line(e)[:80] + ")"
                        c.update(ms, backend=ran,
                                 fwd_tflops=flops / ms["fwd_ms"] / 1e9,
                                 fwd_bwd_tflops=3.5 * flops / ms["fwd_bwd_ms"] / 1e9)
                    except RuntimeError as e:  # no kernel for this backend and shape, or out of memory
                        said = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
                        c["reason"] = (first_line(e) + ("; " + said[0] if said else ""))[:300]
                cases.append(c)
    flags = {f: getattr(torch.backends.cuda, f)() for f in ("flash_sdp_enabled", "mem_efficient_sdp_enabled",
                                                            "math_sdp_enabled", "cudnn_sdp_enabled")
             if hasattr(torch.backends.cuda, f)}
    return {"flags": flags, "cases": cases}


def has_enable_gqa(torch):
    """Whether this torch's SDPA takes enable_gqa (2.5 and later): tried on a tiny CPU call."""
    t = torch.zeros(1, 2, 4, 8)
    try:
        torch.nn.functional.scaled_dot_product_attention(t, t[:, :1], t[:, :1], enable_gqa=True)
        return True
    except TypeError:
        return False


def environment(torch, gqa_native):
    p = torch.cuda.get_device_properties(0)
    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
           "gpu": p.name, "sms": p.multi_processor_count, "memory_gib": p.total_memory / 2**30,
           "capability": f"{p.major}.{p.minor}", "python": sys.version.split()[0],
           "enable_gqa": gqa_native, "nn.RMSNorm": hasattr(torch.nn, "RMSNorm")}
    try:
        import triton  # pylint: disable=import-outside-toplevel
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    return env


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"torch_reference: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _csv(allowed):
    def parse(text):
        items = [x.strip() for x in text.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"'{text}': choose from {','.join(allowed)}")
        return list(dict.fromkeys(items))
    return parse


def _int(lo, hi):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} must lie in {lo}..{hi}")
        return v
    return parse


def parse_args(argv):
    ap = _Parser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--models", type=_csv(tuple(MODELS)), default=list(MODELS))
    ap.add_argument("--modes", type=_csv(MODES), default=list(MODES))
    ap.add_argument("--steps", type=_int(1, 10000), default=20, help="timed steps (and SDPA iterations)")
    ap.add_argument("--warmup", type=_int(1, 1000), default=3, help="untimed steps first (compiled: compiles)")
    ap.add_argument("--seq-llama", type=_int(16, 131072), default=MODELS["llama3"]["seq"])
    ap.add_argument("--seed", type=_int(0, 2**31 - 1), default=1234)
    ap.add_argument("--gqa-expand", action="store_true", help="repeat_interleave K/V even where enable_gqa exists")
    ap.add_argument("--no-profile", action="store_true", help="skip the profiled step")
    ap.add_argument("--attention-only", action="store_true", help="only the SDPA micro-benchmark")
    ap.add_argument("--json", metavar="PATH", help="write everything measured here (rewritten as parts finish)")
    ap.add_argument("--trace-dir", metavar="DIR", help="keep each profiled step's Chrome trace here")
    ap.add_argument("--compare", metavar="REF.json", help="print acceptance.md's side-by-side (needs no torch)")
    ap.add_argument("--ours", metavar="MODEL=FILE", action="append", default=[],
                    help="with --compare: validate --json output for gpt3 or llama3")
    a = ap.parse_args(argv)
    if a.ours and not a.compare:
        ap.error("--ours goes with --compare REF.json")
    for o in a.ours:
        if o.partition("=")[0] not in MODELS or not o.partition("=")[2]:
            ap.error(f"--ours '{o}': give MODEL=FILE with MODEL one of {','.join(MODELS)}")
    if a.json and not os.path.isdir(os.path.dirname(os.path.abspath(a.json))):
        ap.error(f"--json {a.json}: its folder does not exist")
    if a.trace_dir and not os.path.isdir(a.trace_dir):
        ap.error(f"--trace-dir {a.trace_dir}: not a folder")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.compare:
        try:
            ref = load_json_result(a.compare)
        except (OSError, ValueError) as e:
            print(f"torch_reference: --compare {a.compare}: {e}", file=sys.stderr)
            return 2
        ours = {}
        for o in a.ours:
            key, _, path = o.partition("=")
            try:
                ours[key] = load_json_result(path)
            except (OSError, ValueError) as e:
                ours[key] = f"not read: {e}"
        sys.stdout.write(compare_markdown(ref, ours))
        return 0
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        print("torch_reference: skipped: PyTorch is not installed here")
        return 77
    if not torch.cuda.is_available():
        print("torch_reference: skipped: no CUDA device")
        return 77
    has_gqa = has_enable_gqa(torch)
    gqa_native = has_gqa and not a.gqa_expand
    result = {"tool": "torch_reference", "environment": environment(torch, has_gqa),
              "settings": {"steps": a.steps, "warmup": a.warmup, "seq_llama": a.seq_llama, "seed": a.seed,
                           "gqa": "enable_gqa" if gqa_native else "repeat_interleave",
                           "recipe": "torch.autocast bf16, fp32 parameters, clip 1.0, AdamW(fused=True), SDPA causal"},
              "models": {}, "attention": {}}

    def save():
        if a.json:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=1)

    print(f"torch_reference: {result['environment']['gpu']}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {result['environment']['cudnn']}; GQA through {result['settings']['gqa']}", flush=True)
    try:  # first: quick, and what issue 34's attention bound needs
        result["attention"] = run_attention(torch, a, gqa_native)
    except Exception as e:  # pylint: disable=broad-except
        result["attention"] = {"error": first_line(e), "cases": []}
    save()
    if not a.attention_only:
        for key in a.models:
            seq = a.seq_llama if key == "llama3" else MODELS[key]["seq"]
            result["models"][key] = {"preset": MODELS[key]["preset"], "seq": seq, "shape": MODELS[key],
                                     "model_flops": step_model_flops(MODELS[key], seq),
                                     "meshsim_step_differs": MESHSIM_DIFFERS[key], "modes": {}}
        for mode in a.modes:
            for key in a.models:
                try:
                    r = run_model(torch, key, mode, a, gqa_native)
                except torch.cuda.OutOfMemoryError as e:
                    r = {"status": "not run", "reason": "out of memory: " + first_line(e)}
                except Exception as e:  # pylint: disable=broad-except  (a failed compile, say: report, go on)
                    r = {"status": "not run", "reason": first_line(e)}
                result["models"][key]["modes"][mode] = r
                print(f"torch_reference: {key} {mode}: " + (f"median {r['median_ms']:.2f} ms" if "median_ms" in r
                                                           else r["reason"]), flush=True)
                if mode == "compiled" and hasattr(torch, "_dynamo"):
                    torch._dynamo.reset()  # pylint: disable=protected-access
                gc.collect()
                torch.cuda.empty_cache()
                save()
    result["status"] = status_line(result)
    save()
    print()
    print(format_summary(result))
    print(result["status"])
    return 0 if result["status"].startswith("torch_reference: measured") else 1


if __name__ == "__main__":
    sys.exit(main())
