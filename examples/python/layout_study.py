"""A layout study in a few lines: GPT-3 175B on 1024 H100s, every TP x PP that fits, ranked
by throughput, with the memory of the best layout's first stage, then the same rows as a
pandas DataFrame and a matplotlib plot. Runs as a script (CTest python_example) or cell by
cell in a notebook.

    PYTHONPATH=build/python python3 examples/python/layout_study.py [PLOT.png]

The last cell needs pandas and matplotlib (Debian: python3-pandas python3-matplotlib, which
tools/install-deps.sh installs); without them it says so and stops, unless
MESHSIM_REQUIRE_PANDAS=1, where it fails (CTest sets it when CMake found them).
"""

import os
import sys
import tempfile

import meshsim

SCENARIO = "examples/scenarios/gpt3-175b-1024xh100.yaml"
GPUS = 1024

# Cell 1: one iteration as the scenario gives it.
base = meshsim.simulate(SCENARIO, fidelity="formula")
print(f"{base['layout']}: {base['iteration_s']:.3f} s, MFU {base['mfu']:.3f}")


def layout(tp, pp):
    """The overrides of one layout: DP fills the GPUs; SP needs TP > 1, model chunks PP > 1."""
    return {"parallel.tp": tp, "parallel.pp": pp, "parallel.dp": GPUS // (tp * pp), "parallel.sp": tp > 1,
            "parallel.vchunks": 2 if pp > 1 else 1}


# Cell 2: every TP x PP with DP = GPUs / (TP x PP); invalid layouts come back with their error.
variants = [(tp, pp) for tp in (1, 2, 4, 8) for pp in (1, 2, 4, 8, 16)]
rows = []
for tp, pp in variants:
    try:
        r = meshsim.simulate(SCENARIO, fidelity="formula", overrides=layout(tp, pp))
        rows.append((tp, pp, r["iteration_s"], r["tokens_per_s"], r["fits"]))
    except meshsim.MeshsimError as e:
        print(f"tp={tp} pp={pp}: {e}")
rows.sort(key=lambda row: (not row[4], -row[3]))  # the layouts that fit first, by throughput
print(f"{'tp':>3} {'pp':>3} {'iteration s':>12} {'tokens/s':>12}  fits")
for tp, pp, it, tps, fits in rows:
    print(f"{tp:>3} {pp:>3} {it:>12.3f} {tps:>12.0f}  {fits}")

# Cell 3: the memory of the best layout that fits, per item (ready for pandas.DataFrame).
tp, pp = next((tp, pp) for tp, pp, _, _, fits in rows if fits)
table = meshsim.memory(SCENARIO, overrides=layout(tp, pp))
stage = table["stages"][0]
print(f"best fitting layout tp={tp} pp={pp}: stage 0 holds {stage['total_bytes'] / 2**30:.1f} GiB")
assert rows and all((not a[4], -a[3]) <= (not b[4], -b[3]) for a, b in zip(rows, rows[1:]))

# Cell 4: the rows as a pandas DataFrame, one column per figure; a plot of tokens/s by TP, a
# line per PP, the layouts that do not fit left out.
try:
    import matplotlib

    matplotlib.use("Agg")  # no display needed; in a notebook, drop this line
    import matplotlib.pyplot as plt
    import pandas as pd
except ImportError as e:
    if os.environ.get("MESHSIM_REQUIRE_PANDAS") == "1":
        raise
    print(f"skipping the DataFrame cell: {e} (apt-get install python3-pandas python3-matplotlib)")
    sys.exit(0)
df = pd.DataFrame(rows, columns=["tp", "pp", "iteration_s", "tokens_per_s", "fits"])
fit = df[df["fits"]]
print(fit.pivot(index="tp", columns="pp", values="tokens_per_s").round(0))
fig, ax = plt.subplots(figsize=(6, 4))
for pp, group in fit.groupby("pp"):
    ax.plot(group["tp"], group["tokens_per_s"], marker="o", label=f"pp={pp}")
ax.set_xscale("log", base=2)
ax.set_xticks(sorted(fit["tp"].unique()), [str(t) for t in sorted(fit["tp"].unique())])
ax.set_xlabel("tensor parallel size")
ax.set_ylabel("tokens per second")
ax.legend()
fig.tight_layout()
out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(tempfile.gettempdir(), "layout_study.png")
fig.savefig(out, dpi=100)
print(f"wrote {out}")
assert len(fit) == int(df["fits"].sum()) and os.path.getsize(out) > 0
