"""A layout study in a few lines: GPT-3 175B on 1024 H100s, every TP x PP that fits, ranked
by throughput, with the memory of the best layout's first stage. Runs as a script (CTest
python_example) or cell by cell in a notebook.

    PYTHONPATH=build/python python3 examples/python/layout_study.py
"""

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
rows.sort(key=lambda row: -row[3])
print(f"{'tp':>3} {'pp':>3} {'iteration s':>12} {'tokens/s':>12}  fits")
for tp, pp, it, tps, fits in rows:
    print(f"{tp:>3} {pp:>3} {it:>12.3f} {tps:>12.0f}  {fits}")

# Cell 3: the memory of the best layout that fits, per item (ready for pandas.DataFrame).
tp, pp = next((tp, pp) for tp, pp, _, _, fits in rows if fits)
table = meshsim.memory(SCENARIO, overrides=layout(tp, pp))
stage = table["stages"][0]
print(f"best fitting layout tp={tp} pp={pp}: stage 0 holds {stage['total_bytes'] / 2**30:.1f} GiB")
assert rows and all(a[3] >= b[3] for a, b in zip(rows, rows[1:]))
