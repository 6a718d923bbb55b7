"""meshsim from Python: simulate training iterations, memory tables and collectives.

Each function runs the same code as the meshsim command of the same name and returns its
--json output as plain Python objects (dicts, lists, numbers, strings), ready for pandas.
A bad input raises MeshsimError (a ValueError) with meshsim's one-line message.

    import meshsim
    r = meshsim.simulate("examples/scenarios/gpt3-175b-1024xh100.yaml", fidelity="formula")
    r["iteration_s"], r["mfu"], r["breakdown_s"]
    r = meshsim.simulate({"model": {"preset": "gpt3-175b"}, "parallel": {"tp": 8, "pp": 8, "dp": 16},
                          "topology": "dgx-h100:nodes=128"}, overrides={"parallel.microbatches": 64})
    meshsim.memory("examples/scenarios/llama3-70b-128k.yaml")["stages"]
    meshsim.collective("allreduce", "1GiB", topology="dgx-h100:nodes=2")[0]["busbw_GBps"]
    rows = meshsim.sweep("examples/scenarios/tiny-gpt-cpu.yaml", {"parallel.tp": [1, 2, 4]})

docs/python.md describes every function and field.
"""

import json

from . import _meshsim
from ._meshsim import MeshsimError

__version__ = _meshsim.__version__  # the project's (CMakeLists.txt), as `meshsim --version` prints it

__all__ = ["simulate", "memory", "collective", "sweep", "MeshsimError", "__version__"]


def _scenario_args(scenario, overrides, set):
    """(path, yaml_text, sets) for the native functions."""
    path, text = "", ""
    if isinstance(scenario, dict):
        text = json.dumps(scenario)  # JSON is YAML
    elif scenario is not None:
        path = str(scenario)
    sets = [f"{k}={_value(v)}" for k, v in (overrides or {}).items()]
    sets += list(set or [])
    return path, text, sets


def _value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def simulate(scenario=None, *, fidelity=None, overrides=None, set=None, links=False, collectives=False):
    """One training iteration: `meshsim simulate SCENARIO --json` as a dict.

    scenario: a YAML path, a dict in the scenario format (docs/scenarios.md), or None for the
    built-in default. overrides: {"parallel.tp": 4, ...} (each as --set path=value); set: a
    list of "path=value" strings, applied after overrides. fidelity: "formula", "flow" or
    "nccl" (default: the scenario's run.fidelity). links: also return "links", one dict per
    link that carried bytes at flow fidelity (link, name, tier, capacity_GBps, bytes,
    utilization, peak: the rows of `simulate --links`), ready for pandas.DataFrame.
    collectives: also return "collectives", one dict per (stage, axis, kind, bytes, group):
    count, time_s, mean_us, exposed_s (the rows of `simulate --collectives`; simulated op by op).
    A scenario with jobs: (several jobs on one fabric) returns `simulate --json`'s jobs object:
    "jobs", one dict per job with alone_s, together_s, slowdown and each run's full figures.
    """
    path, text, sets = _scenario_args(scenario, overrides, set)
    return json.loads(_meshsim.simulate(path, text, sets, fidelity or "", bool(links), bool(collectives)))


def memory(scenario=None, *, overrides=None, set=None):
    """The itemized memory table per pipeline stage: `meshsim memory SCENARIO --json`."""
    path, text, sets = _scenario_args(scenario, overrides, set)
    return json.loads(_meshsim.memory(path, text, sets))


def collective(kind, bytes="1GiB", *, topology="dgx-h100", algo="auto", fidelity=None, ranks=0, mesh=None,
               placement="natural", group="all", root=0, chunks=0, explain=False):
    """One collective as `meshsim collective KIND -t TOPOLOGY --bytes BYTES --algo ALGO --json` runs it:
    `ranks` of the topology's GPUs (0: all, or the mesh's size), arranged as `mesh` ("row=4,col=4";
    default 1D, or square for row/col groups) and placed by `placement` (natural, bunched:RxC,
    list:g0,g1,...), run by every group along `group` (all, row, col or a mesh dimension) at once.

    bytes: a size ("256MiB", 1 << 20) or a sweep "MIN:MAX[:FACTOR]". Returns a list with one
    dict per size (time_us, algbw_GBps, busbw_GBps, algorithm, protocol, busiest_links, ...);
    explain=True adds "explain", the formula with numbers and (groups of up to 16) the step
    table, as --explain prints them.
    """
    return json.loads(_meshsim.collective(kind, str(bytes), topology, algo, fidelity or "", int(ranks), mesh or "",
                                          placement, group, int(root), int(chunks), bool(explain)))


def moe_dispatch(topology="dgx-h100", *, ranks=0, tokens=4096, hidden=7168, experts=256, topk=8, groups=4,
                 dtype="fp8", fidelity="flow", seed=1, samples=20000):
    """One MoE token dispatch as DeepEP's normal kernels run it (one RDMA copy per destination
    node, NVLink forwarding there) on the first `ranks` GPUs of `topology` (0: all):
    `meshsim moe-dispatch -t TOPOLOGY ... --json`. groups: nodes a token may use (0: no
    limit). Returns a dict: routing (nodes_per_token, gpus_per_token), bytes_per_gpu, time_s,
    bound, wire_GBps and deepep_GBps (bandwidths as DeepEP's tests count them).
    """
    return json.loads(_meshsim.moe_dispatch(topology, int(ranks), int(tokens), int(hidden), int(experts), int(topk),
                                            int(groups), dtype, fidelity, int(seed), int(samples)))


def _values(v):
    """A vary entry's values: a list or tuple as given, anything else (a string too) as one value."""
    return list(v) if isinstance(v, (list, tuple, range)) else [v]


def sweep(scenario=None, vary=None, *, fidelity=None, overrides=None, set=None, rank_by="tokens_per_s", jobs=0):
    """Every combination of the `vary` values ({"parallel.tp": [1, 2, 4], "parallel.recompute": "full"}; a
    single value, a string too, is one value), each simulated as simulate(scenario, overrides=overrides |
    variant) would, by `meshsim sweep`'s engine on `jobs` threads (0: one per CPU).

    Returns a list of rows, ranked as `meshsim sweep --rank-by` ranks: the layouts that fit by
    `rank_by` (tokens_per_s, mfu: most first; iteration_s, memory: least first), then those that do
    not fit, then the variants that failed, each with its "error". Each row:
    {"set": {path: value, ...}, "parallel": {"dp": ..., "tp": ..., "global_batch": ...}, "result":
    simulate's dict} or {"set": ..., "error": str}.
    """
    vary = dict(vary or {})
    paths = list(vary)
    values = [_values(vary[p]) for p in paths]
    # The variants replace overrides of the same path; `set` and fidelity come before them.
    path, text, sets = _scenario_args(scenario, {k: v for k, v in (overrides or {}).items() if k not in vary}, set)
    native_vary = [(p, [_value(v) for v in vs]) for p, vs in zip(paths, values)]
    out = []
    # Ranked; each row names the value each path took by its place in that path's values.
    for choices, valid, result in _meshsim.sweep(path, text, sets, fidelity or "", native_vary, rank_by, int(jobs)):
        variant = {p: vs[c] for p, vs, c in zip(paths, values, choices)}
        if valid:
            r = json.loads(result)
            out.append({"set": variant, "parallel": r["parallel"], "result": r})
        else:
            out.append({"set": variant, "error": result})
    return out
