"""The Python module against the meshsim command: the same scenario gives the same JSON,
errors arrive as MeshsimError with the command's message, and the collective follows its
closed form where one is exact. Run by CTest (python_pytest) with PYTHONPATH=build/python and
MESHSIM_BINARY set to the command's binary."""

import json
import math
import os
import subprocess

import pytest

import meshsim

BIN = os.environ.get("MESHSIM_BINARY", "build/cli/meshsim")
TINY = "examples/scenarios/tiny-gpt-cpu.yaml"


def cli_json(*args):
    out = subprocess.run([BIN, *args, "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_simulate_equals_the_command_byte_for_byte_in_its_figures():
    for scenario, extra in ((TINY, []), ("examples/scenarios/gpt3-175b-1024xh100.yaml", ["--fidelity", "formula"])):
        want = cli_json("simulate", scenario, *extra)
        got = meshsim.simulate(scenario, fidelity="formula" if extra else None)
        assert got == want


def test_jobs_on_one_fabric_equal_the_command():
    scenario = "examples/whatif/two-jobs.yaml"
    want = cli_json("simulate", scenario)
    got = meshsim.simulate(scenario)
    assert got == want
    assert [j["name"] for j in got["jobs"]] == ["mine", "theirs"]
    for job in got["jobs"]:
        assert job["together_s"] >= job["alone_s"]
        assert job["together"]["iteration_s"] == job["together_s"]
    # Kept within their own leaves, the two jobs share no link and take their time alone.
    apart = meshsim.simulate(scenario, overrides={"jobs.0.nodes": "0-15", "jobs.1.nodes": "16-31"})
    assert [j["slowdown"] for j in apart["jobs"]] == [0.0, 0.0]


def test_links_are_the_rows_of_simulate_links(tmp_path):
    scenario = "examples/scenarios/moe-ep-vs-tp.yaml"
    csv_path = tmp_path / "links.csv"
    subprocess.run([BIN, "simulate", scenario, "--links", str(csv_path)], check=True, capture_output=True)
    rows = csv_path.read_text().splitlines()
    got = meshsim.simulate(scenario, links=True)
    assert rows[0] == ",".join(got["links"][0].keys())
    assert len(got["links"]) == len(rows) - 1
    for line, link in zip(rows[1:], got["links"]):
        cells = line.split(",")
        assert int(cells[0]) == link["link"] and cells[1] == link["name"] and cells[2] == link["tier"]
        assert float(cells[4]) == pytest.approx(link["bytes"], rel=1e-12)
    assert sum(l["bytes"] for l in got["links"]) == pytest.approx(sum(t["bytes"] for t in got["link_tiers"]))
    del got["links"]
    assert got == meshsim.simulate(scenario)


def test_default_scenario_and_overrides_are_the_commands_set():
    want = cli_json("simulate", "--set", "parallel.tp=4", "--set", "parallel.dp=4")
    assert meshsim.simulate(overrides={"parallel.tp": 4, "parallel.dp": 4}) == want
    assert meshsim.simulate(set=["parallel.tp=4", "parallel.dp=4"]) == want


def test_a_dict_scenario_equals_the_same_yaml_file(tmp_path):
    scenario = {
        "name": "dict-case",
        "model": {"layers": 4, "hidden": 256, "heads": 4, "ffn_hidden": 1024, "vocab": 4096, "seq": 256,
                  "dtype": "fp32"},
        "parallel": {"tp": 2, "pp": 2, "dp": 2, "micro_batch_size": 2, "microbatches": 4},
    }
    path = tmp_path / "case.yaml"
    path.write_text(json.dumps(scenario))  # JSON is YAML
    assert meshsim.simulate(scenario) == cli_json("simulate", str(path))


def test_collectives_table_equals_the_commands(tmp_path):
    got = meshsim.simulate(TINY, collectives=True)["collectives"]
    out = tmp_path / "c.json"
    subprocess.run([BIN, "simulate", TINY, "--collectives", str(out)], check=True, capture_output=True)
    assert got == json.loads(out.read_text()) and got
    assert all(r["exposed_s"] <= r["time_s"] * (1 + 1e-12) for r in got)


def test_memory_equals_the_command():
    assert meshsim.memory(TINY) == cli_json("memory", TINY)


def test_errors_carry_the_commands_message():
    with pytest.raises(meshsim.MeshsimError) as e:
        meshsim.simulate(TINY, overrides={"parallel.tp": 3})
    proc = subprocess.run([BIN, "simulate", TINY, "--set", "parallel.tp=3"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert str(e.value) in proc.stderr
    assert isinstance(e.value, ValueError)
    with pytest.raises(meshsim.MeshsimError, match="fidelity"):
        meshsim.simulate(TINY, fidelity="flwo")
    with pytest.raises(meshsim.MeshsimError, match="kind"):
        meshsim.collective("allreduse", "1MiB")
    # A negative rank count is refused as the command refuses it (it ran on every GPU before).
    with pytest.raises(meshsim.MeshsimError, match="ranks"):
        meshsim.collective("allreduce", "1MiB", ranks=-5)
    with pytest.raises(meshsim.MeshsimError, match="ranks"):
        meshsim.moe_dispatch(ranks=-5)


def test_errors_name_keyword_arguments_not_flags():
    # The command says --algo; Python names the keyword argument it was given.
    with pytest.raises(meshsim.MeshsimError) as e:
        meshsim.collective("allreduce", "1MiB", algo="rnig")
    assert str(e.value).startswith("algo: 'rnig' is not an algorithm for allreduce"), str(e.value)
    with pytest.raises(meshsim.MeshsimError) as e:
        meshsim.collective("alltoall", "1MiB", algo="nccl", fidelity="nccl")
    assert str(e.value).startswith("algo=nccl: "), str(e.value)
    assert "use algo=auto" in str(e.value) and "--" not in str(e.value)
    with pytest.raises(meshsim.MeshsimError) as e:
        meshsim.moe_dispatch(tokens=0)
    assert str(e.value).startswith("tokens: 0 tokens per rank"), str(e.value)
    proc = subprocess.run([BIN, "collective", "allreduce", "-b", "1MiB", "--algo", "rnig"], capture_output=True,
                          text=True)
    assert "--algo: 'rnig' is not an algorithm for allreduce" in proc.stderr


def test_collective_takes_the_commands_mesh_placement_group_and_explain():
    kw = dict(topology="dgx-h100:nodes=2", mesh="row=4,col=4", placement="bunched:2x4", group="row", algo="ring")
    got = meshsim.collective("allgather", "16MiB", **kw)
    want = cli_json("collective", "allgather", "-t", "dgx-h100:nodes=2", "--bytes", "16MiB", "--mesh", "row=4,col=4",
                    "--placement", "bunched:2x4", "--group", "row", "--algo", "ring")
    assert got == [want]
    assert want["groups"] == 4 and want["ranks"] == 4
    (r,) = meshsim.collective("allreduce", "1MiB", topology="dgx-h100", ranks=4, algo="ring", explain=True)
    text = subprocess.run([BIN, "collective", "allreduce", "-t", "dgx-h100", "-n", "4", "-b", "1MiB", "--algo", "ring",
                           "--explain"], capture_output=True, text=True, check=True).stdout
    assert r["explain"] and text.endswith(r["explain"])
    assert "explain" not in meshsim.collective("allreduce", "1MiB", ranks=4)[0]


def test_collective_equals_the_command_and_the_ring_closed_form():
    got = meshsim.collective("allreduce", "64MiB:256MiB", topology="dgx-h100:nodes=2", algo="multiring")
    want = cli_json("collective", "allreduce", "-t", "dgx-h100:nodes=2", "--bytes", "64MiB:256MiB", "--algo",
                    "multiring")
    assert got == want and len(got) == 3
    # A ring all-reduce on p ranks of a switch with no protocols: 2(p-1) steps of alpha and
    # n/p bytes at the link bandwidth (docs/math.md section 1).
    (r,) = meshsim.collective("allreduce", "64MiB", topology="switch:gpus_per_node=8", algo="ring",
                              fidelity="formula")
    p, n = 8, 64 * 2**20
    alpha_us, bw = r["alpha_us"], r["bandwidth_GBps"] * 1e9
    assert r["time_us"] == pytest.approx(2 * (p - 1) * (alpha_us + n / p / bw * 1e6), rel=1e-6)


def test_collective_on_mi300x_runs_rccls_mesh_rings_at_seven_links():
    # Eight MI300X joined pairwise by xGMI (48 GB/s a link): auto takes mesh_rings, and at 16 GiB
    # the bus bandwidth nears 7 links' worth, 336 GB/s (docs/collectives.md, mesh_rings).
    got = meshsim.collective("allreduce", "16GiB", topology="mi300x", fidelity="flow")
    assert got == [cli_json("collective", "allreduce", "-t", "mi300x", "--bytes", "16GiB", "-f", "flow")]
    (r,) = got
    assert r["algorithm"] == "mesh_rings"
    assert r["busbw_GBps"] == pytest.approx(336, rel=0.01)


def test_moe_dispatch_equals_the_command_and_the_closed_form_routing():
    topo = "dgx-h100:nvlink_bandwidth=200GB/s,nvlink_efficiency=0.8,nodes=4"
    got = meshsim.moe_dispatch(topo)
    assert got == cli_json("moe-dispatch", "-t", topo)
    # No node limit on 4 nodes (groups 4): a node misses a token's top-8 of 256 experts with
    # probability C(192,8)/C(256,8) (docs/math.md section 8).
    miss = math.prod((192 - i) / (256 - i) for i in range(8))
    assert got["routing"]["exact"] and got["routing"]["nodes_per_token"] == pytest.approx(4 * (1 - miss), rel=1e-12)
    assert got["bound"] == "NIC"
    # The field is named as the keyword argument, not as the command's flag (issue 36).
    with pytest.raises(meshsim.MeshsimError, match="^experts: 100 experts do not split evenly") as e:
        meshsim.moe_dispatch(topo, experts=100)
    assert "--" not in str(e.value)
    with pytest.raises(meshsim.MeshsimError, match="^algo: 'bogus' is not an algorithm for allreduce") as e:
        meshsim.collective("allreduce", "1MiB", algo="bogus")
    assert "--" not in str(e.value)


def test_sweep_ranks_the_valid_variants_and_keeps_the_errors():
    base = {"parallel.pp": 1, "parallel.sp": False, "parallel.zero": 0, "topology": "dgx-h100:nodes=1,gpus_per_node=4"}
    rows = meshsim.sweep(TINY, {"parallel.tp": [1, 2, 4], "parallel.dp": [1, 2, 4]}, overrides=base)
    valid = [r for r in rows if "result" in r]
    failed = [r for r in rows if "error" in r]
    # Only tp x dp = 4 uses the 4 GPUs; the other six are rows with the command's error.
    assert sorted((r["set"]["parallel.tp"], r["set"]["parallel.dp"]) for r in valid) == [(1, 4), (2, 2), (4, 1)]
    assert len(failed) == 6 and all("product is 4" in r["error"] for r in failed)
    assert rows[: len(valid)] == valid  # valid first, best first
    speeds = [r["result"]["tokens_per_s"] for r in valid]
    assert speeds == sorted(speeds, reverse=True)
    for r in valid:
        assert r["result"] == meshsim.simulate(TINY, overrides={**base, **r["set"]})
        # The layout as numbers: the varied tp and dp, and the global batch they make.
        p = r["parallel"]
        assert (p["tp"], p["dp"]) == (r["set"]["parallel.tp"], r["set"]["parallel.dp"])
        assert p["global_batch"] == p["dp"] * p["microbatches"] * p["micro_batch_size"]


def test_sweep_takes_a_string_as_one_value_and_ranks_by_the_metric_named():
    base = {"parallel.pp": 1, "parallel.sp": False, "parallel.zero": 0, "topology": "dgx-h100:nodes=1,gpus_per_node=4"}
    rows = meshsim.sweep(TINY, {"parallel.tp": [1, 2, 4], "parallel.dp": "auto", "parallel.recompute": "full"},
                         overrides=base, rank_by="iteration_s", jobs=2)
    assert len(rows) == 3  # 3 x 1 x 1, not the characters of "auto" and "full"
    assert all(r["set"]["parallel.recompute"] == "full" and "result" in r for r in rows)
    times = [r["result"]["iteration_s"] for r in rows]
    assert times == sorted(times)  # least first
    by_memory = meshsim.sweep(TINY, {"parallel.tp": [1, 2, 4], "parallel.dp": "auto"}, overrides=base,
                              rank_by="memory")
    peaks = [max(s["peak_bytes"] for s in r["result"]["memory"]) for r in by_memory]
    assert peaks == sorted(peaks)
    with pytest.raises(meshsim.MeshsimError, match="rank_by: 'speed' is not a metric"):
        meshsim.sweep(TINY, {"parallel.tp": [1]}, rank_by="speed")


def test_sweep_is_the_commands_sweep_in_the_commands_order():
    # One engine (sim/sweep.h): the rows, their order under every rank_by and each variant's
    # figures are `meshsim sweep --json`'s; the Python rows add simulate's dict.
    base = {"parallel.pp": 1, "parallel.sp": False, "parallel.zero": 0, "topology": "dgx-h100:nodes=1,gpus_per_node=4"}
    sets = [f"--set={k}={'false' if v is False else v}" for k, v in base.items()]
    for rank_by in ("tokens_per_s", "iteration_s", "mfu", "memory"):
        rows = meshsim.sweep(TINY, {"parallel.tp": [1, 2, 4], "parallel.dp": ["auto", 1, 2]}, overrides=base,
                             rank_by=rank_by, jobs=2)
        want = cli_json("sweep", TINY, *sets, "--vary", "parallel.tp=1,2,4", "--vary", "parallel.dp=auto,1,2",
                        "--rank-by", rank_by)
        assert [r["set"] for r in rows] == [w["vary"] for w in want]
        for r, w in zip(rows, want):
            assert ("error" in r) == ("error" in w)
            if "result" in r:
                assert (r["result"]["tokens_per_s"], r["result"]["fits"]) == (w["tokens_per_s"], w["fits"])


def test_sweep_puts_the_layouts_that_fit_first():
    # On 8 RTX 5000s (16 GB) a 8-layer h 3072 GPT fits with tp 2 x dp 4 and tp 4 x dp 2, not with
    # tp 1 x dp 8 (the CLI's Sweep.RankedTableAndCsv case): whatever its tokens/s, it comes last.
    small = {"model": {"layers": 8, "hidden": 3072, "heads": 12, "ffn_hidden": 12288, "vocab": 50304, "seq": 1024},
             "parallel": {"dp": 1, "tp": 1, "pp": 1, "microbatches": 2}, "topology": "switch:gpus_per_node=8",
             "gpu": "rtx5000"}
    rows = meshsim.sweep(small, {"parallel.tp": [1, 2, 4, 8], "parallel.dp": [1, 2, 4, 8]})
    valid = [r for r in rows if "result" in r]
    assert [r["result"]["fits"] for r in valid] == [True, True, False]
    assert valid[2]["set"] == {"parallel.tp": 1, "parallel.dp": 8}


def test_version_is_the_commands():
    out = subprocess.run([BIN, "--version"], check=True, capture_output=True, text=True).stdout
    assert out.strip() == f"meshsim {meshsim.__version__}"
