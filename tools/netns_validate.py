#!/usr/bin/env python3
"""Predicted vs measured on a real (shaped) network: hosts as Linux network namespaces.

Builds N hosts as network namespaces, each with one veth link into a switch namespace
that holds Linux bridges, shapes every link with tc tbf (both directions: egress of the
host end and of the switch end), writes a topology YAML describing that network for the
simulator, runs one meshsim rank per namespace (`meshsim validate SCENARIO --backend cpu`,
the script is the launcher) and compares rank 0's predicted and measured times.

Layouts:
  flat       h0 .. hN-1 -- br0                       (one switch, every link RATE)
  two-level  h0..h3 -- br0 ==uplink== br1 -- h4..h7  (PER_LEAF hosts behind each end of
             one shaped uplink between two leaf bridges, the uplink at UPLINK_RATE)

Cases (--ci: 4, 16, 64 MiB; --full adds 256 MiB):
  1. ring all-reduce and binomial-tree broadcast, 4 and 8 ranks, on the flat switch:
     predicted and measured totals must agree within --tolerance (15%).
  2. on the two-level layout (8 hosts, 4 per leaf, a node label per leaf), all-reduces
     along each dimension of a row=2,col=4 mesh placed `natural` and `bunched:2x2`: the
     measured natural/bunched ratio must have the simulator's direction and lie within
     the tolerance of the predicted ratio.

Latency is not imposed (these kernels have no netem): it is measured with meshsim's own
ping-pong (validate without a topology on two ranks) and written into the topology, as is
the payload efficiency of a TCP/IPv4 frame, (MTU - 52) / (MTU + 14): tbf counts whole
Ethernet frames, TCP carries MSS = MTU - 40 - 12 (timestamps) bytes of payload in each.

Exit status: 0 all cases pass, 1 a case misses its bound or a run fails, 77 skipped
(not root, no `ip netns`, no tc tbf), 2 bad usage. Every namespace, bridge and rank this
script creates is removed on exit (namespaces are named ms<pid>...).
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SKIP = 77
SUBNET = "10.77.0."
PORT = 29500


def sh(*args, check=True, capture=False):
    r = subprocess.run(list(args), stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r


def skip(why):
    print(f"SKIP: {why}", flush=True)
    sys.exit(SKIP)


def parse_rate_bits(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", text)
    if not m:
        raise SystemExit(f"rate '{text}': write it as tc does, e.g. 400mbit")
    return float(m.group(1)) * {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[m.group(2)]


class Network:
    """Namespaces <prefix>h<i> (hosts) and <prefix>sw (bridges); removed by close()."""

    def __init__(self, prefix, hosts, per_leaf, rate, uplink_rate, burst, queue, mtu):
        self.prefix, self.hosts, self.per_leaf = prefix, hosts, per_leaf
        self.leaves = (hosts + per_leaf - 1) // per_leaf
        self.sw = f"{prefix}sw"
        self.created = []
        self.tbf = ["burst", burst, "latency", queue]
        self._add_ns(self.sw)
        for b in range(self.leaves):
            sh("ip", "-n", self.sw, "link", "add", f"br{b}", "type", "bridge")
            sh("ip", "-n", self.sw, "link", "set", f"br{b}", "up")
        for i in range(self.hosts):
            ns = self.host(i)
            self._add_ns(ns)
            sh("ip", "link", "add", f"h{i}", "netns", self.sw, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "-n", self.sw, "link", "set", f"h{i}", "mtu", str(mtu), "master", f"br{i // per_leaf}", "up")
            sh("ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtu), "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            # No slow-start restart after the idle gaps between collectives.
            sh("ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=0")
            self._shape(ns, "eth0", rate)          # host -> switch
            self._shape(self.sw, f"h{i}", rate)    # switch -> host
        for b in range(1, self.leaves):  # leaf b-1 <-> leaf b (a chain; two leaves: one uplink)
            a, c = f"up{b - 1}{b}a", f"up{b - 1}{b}b"
            sh("ip", "-n", self.sw, "link", "add", a, "mtu", str(mtu), "type", "veth", "peer", "name", c, "mtu", str(mtu))
            sh("ip", "-n", self.sw, "link", "set", a, "master", f"br{b - 1}", "up")
            sh("ip", "-n", self.sw, "link", "set", c, "master", f"br{b}", "up")
            self._shape(self.sw, a, uplink_rate)
            self._shape(self.sw, c, uplink_rate)

    def _add_ns(self, ns):
        sh("ip", "netns", "add", ns)
        self.created.append(ns)

    def _shape(self, ns, dev, rate):
        sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, *self.tbf)

    def host(self, i):
        return f"{self.prefix}h{i}"

    def addr(self, i):
        return f"{SUBNET}{i + 1}"

    def close(self):
        for ns in reversed(self.created):
            pids = sh("ip", "netns", "pids", ns, check=False, capture=True).stdout.split()
            for p in pids:  # only processes inside our own namespaces
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)
        self.created = []


def run_ranks(net, meshsim, scenario, world, timeout, hosts=None):
    """Runs `meshsim validate scenario` on ranks 0..world-1 (rank r in namespace hosts[r]);
    returns rank 0's JSON. Kills every rank when one fails or the timeout passes."""
    hosts = hosts or list(range(world))
    token = os.urandom(8).hex()
    procs = []
    try:
        for r in range(world):
            env = [f"MESHSIM_RANK={r}", f"MESHSIM_WORLD_SIZE={world}", f"MESHSIM_MASTER_ADDR={net.addr(hosts[0])}",
                   f"MESHSIM_MASTER_PORT={PORT}", f"MESHSIM_TOKEN={token}", f"MESHSIM_BIND_ADDR={net.addr(hosts[r])}"]
            cmd = ["ip", "netns", "exec", net.host(hosts[r]), "timeout", "-k", "5", str(timeout), "env", *env,
                   meshsim, "validate", scenario, "--backend", "cpu", "--json", "--timeout", str(min(60, timeout))]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))
        deadline = time.monotonic() + timeout + 10
        outs = [None] * world
        while any(o is None for o in outs):
            for r, p in enumerate(procs):
                if outs[r] is None and p.poll() is not None:
                    outs[r] = p.communicate()
                    if p.returncode != 0:
                        raise RuntimeError(f"rank {r} exited with {p.returncode}: {outs[r][1].strip()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"ranks still running after {timeout + 10} s")
            time.sleep(0.05)
        return json.loads(outs[0][0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def measure_latency(net, meshsim, work, a, b):
    """One-way latency (s) between hosts a and b, from meshsim's ping-pong over its own
    transport (validate without topology), and the loaded bandwidth it measured (B/s)."""
    sc = write(os.path.join(work, f"probe-{a}-{b}.yaml"),
               "name: netns-probe\nworkload: {collective: allreduce, bytes: 4KiB, algorithm: ring, iterations: 1}\n")
    j = run_ranks(net, meshsim, sc, 2, 120, hosts=[a, b])
    lat = float(re.search(r"latency=([0-9.]+)us", j["machine_model"]).group(1)) * 2e-6  # per hop x 2 hops
    bw = float(re.search(r"bandwidth=([0-9.]+)GB/s", j["machine_model"]).group(1)) * 1e9
    return lat, bw


def topology_yaml(name, net, rate_bits, uplink_bits, eff, host_lat, uplink_lat):
    lines = [f"# Written by tools/netns_validate.py: {net.hosts} network namespaces, tbf-shaped veth links.",
             "# efficiency: TCP payload per Ethernet frame; latency: measured ping-pong (one way) split over the hops.",
             f"name: {name}", "devices:"]
    for i in range(net.hosts):
        node = i // net.per_leaf if net.leaves > 1 else i
        lines.append(f"  - {{name: h{i}, kind: gpu, node: {node}}}")
    for b in range(net.leaves):
        lines.append(f"  - {{name: br{b}, kind: {'leaf' if net.leaves > 1 else 'switch'}}}")
    lines.append("links:")
    for i in range(net.hosts):
        lines.append(f"  - {{a: h{i}, b: br{i // net.per_leaf}, kind: ethernet, bandwidth: {rate_bits / 1e6:g}Mb/s, "
                     f"efficiency: {eff:.4f}, latency: {host_lat * 1e6:.2f}us}}")
    for b in range(1, net.leaves):
        lines.append(f"  - {{a: br{b - 1}, b: br{b}, kind: ethernet, bandwidth: {uplink_bits / 1e6:g}Mb/s, "
                     f"efficiency: {eff:.4f}, latency: {uplink_lat * 1e6:.2f}us}}")
    return "\n".join(lines) + "\n"


def scenario_yaml(name, topo, workload, placement=None):
    text = f"name: {name}\ntopology: {topo}\nrun: {{fidelity: flow}}\nworkload: {{{workload}}}\n"
    if placement:
        text += f"placement: {placement}\n"
    return text


def iterations_for(size_mib):
    return 5 if size_mib <= 4 else 3 if size_mib <= 16 else 2


def per_op(j):
    """Predicted and measured time of one iteration: the prediction is the same for every
    iteration; the measurement is the median over iterations (an op slowed by a scheduler
    hiccup on a loaded 2-core host does not decide the case, as in any benchmark)."""
    ops = [o["measured_s"] for o in j["ops"]]
    return j["ops"][0]["predicted_s"], statistics.median(ops)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--meshsim", default="build/cli/meshsim", help="the meshsim binary")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--ci", action="store_true", help="4, 16, 64 MiB (the CTest run; the default)")
    mode.add_argument("--full", action="store_true", help="4, 16, 64, 256 MiB")
    ap.add_argument("--rate", default="100mbit", help="every host link, per direction (tc syntax; default 100mbit)")
    ap.add_argument("--uplink-rate", default=None, help="the two-level uplink, per direction (default: --rate)")
    ap.add_argument("--burst", default="256kb", help="tbf burst (default 256kb: a 64 KiB GSO frame passes whole, see docs/validation/netns.md)")
    ap.add_argument("--queue", default="5ms", help="tbf latency, i.e. queue limit (default 5ms; see docs/validation/netns.md)")
    ap.add_argument("--mtu", type=int, default=9000, help="veth MTU (default 9000: fewer packets, less CPU)")
    ap.add_argument("--tolerance", type=float, default=15.0, help="percent (default 15)")
    ap.add_argument("--only", choices=["flat", "placement"], help="run one part only")
    ap.add_argument("--sizes", help="MiB, comma-separated (overrides --ci/--full), e.g. 4,64")
    ap.add_argument("--ranks", default="4,8", help="rank counts of the flat cases (default 4,8)")
    ap.add_argument("--collectives", default="allreduce,broadcast", help="flat cases (default allreduce,broadcast)")
    ap.add_argument("--out", help="keep the topology and scenario files here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every op's measured and predicted time")
    args = ap.parse_args()

    if os.geteuid() != 0:
        skip("needs root to create network namespaces (ip netns); run as root, e.g. in CI")
    for tool in ("ip", "tc", "timeout"):
        if shutil.which(tool) is None:
            skip(f"'{tool}' not found; install iproute2 and coreutils (tools/install-deps.sh)")
    meshsim = os.path.abspath(args.meshsim)
    if not os.access(meshsim, os.X_OK):
        print(f"error: --meshsim {meshsim} is not an executable; build it first (ninja -C build meshsim)")
        return 2
    prefix = f"ms{os.getpid() % 100000}"
    probe = f"{prefix}probe"
    r = sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        skip(f"cannot create a network namespace ({r.stderr.strip()}); ip netns does not work here")
    try:
        r = sh("ip", "-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1", check=False)
        if r.returncode == 0:
            r = sh("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "p0", "root", "tbf", "rate", "1mbit",
                   "burst", "16kb", "latency", "10ms", check=False)
        if r.returncode != 0:
            skip(f"veth pairs or tc tbf do not work here ({r.stderr.strip()})")
    finally:
        sh("ip", "netns", "del", probe, check=False)

    sizes = [4, 16, 64, 256] if args.full else [4, 16, 64]
    if args.sizes:
        sizes = [int(x) for x in args.sizes.split(",")]
    rate_bits = parse_rate_bits(args.rate)
    uplink = args.uplink_rate or args.rate
    uplink_bits = parse_rate_bits(uplink)
    eff = (args.mtu - 52) / (args.mtu + 14)
    work = args.out or tempfile.mkdtemp(prefix="meshsim-netns-")
    os.makedirs(work, exist_ok=True)
    tol = args.tolerance
    failures = []
    net = None

    def cleanup(*_):
        if net:
            net.close()
        sys.exit(1)

    signal.signal(signal.SIGTERM, cleanup)
    signal.signal(signal.SIGINT, cleanup)
    t_start = time.monotonic()
    print(f"netns validation: host links {args.rate} per direction (tbf burst {args.burst}, queue {args.queue}), "
          f"MTU {args.mtu}, payload efficiency {eff:.4f}; files in {work}", flush=True)
    try:
        if args.only in (None, "flat"):
            net = Network(prefix, 8, 8, args.rate, args.rate, args.burst, args.queue, args.mtu)
            lat, bw = measure_latency(net, meshsim, work, 0, 1)
            print(f"flat switch, 8 hosts: ping-pong one way {lat * 1e6:.1f} us; loaded ring shift "
                  f"{bw * 8e-6:.1f} Mbit/s payload (model {rate_bits * eff * 1e-6:.1f})", flush=True)
            topo = write(os.path.join(work, "netns-flat.yaml"),
                         topology_yaml("netns-flat", net, rate_bits, rate_bits, eff, lat / 2, 0.0))
            print(f"\n{'case (one iteration; median)':<34} {'predicted':>10} {'measured':>10} {'error':>8}", flush=True)
            algs = {"allreduce": "ring", "broadcast": "binomial"}
            for world in [int(x) for x in args.ranks.split(",")]:
                for coll, alg in [(c, algs[c]) for c in args.collectives.split(",")]:
                    for mib in sizes:
                        it = iterations_for(mib)
                        sc = write(os.path.join(work, f"{coll}-{world}-{mib}.yaml"), scenario_yaml(
                            f"netns-{coll}", topo,
                            f"collective: {coll}, bytes: {mib}MiB, algorithm: {alg}, iterations: {it}"))
                        j = run_ranks(net, meshsim, sc, world, 600)
                        p, m = per_op(j)
                        if args.verbose:
                            print("    ops measured: " + " ".join(f"{o['measured_s'] * 1e3:.1f}" for o in j["ops"]) +
                                  f" ms, predicted {j['ops'][0]['predicted_s'] * 1e3:.1f} ms each", flush=True)
                        err = 100.0 * (m - p) / p
                        case = f"{alg} {coll} {world} ranks {mib} MiB"
                        ok = abs(err) <= tol
                        print(f"{case:<34} {p:>9.3f}s {m:>9.3f}s {err:>+7.1f}%{'' if ok else '  MISS'}", flush=True)
                        if not ok:
                            failures.append(f"{case}: {err:+.1f}%")
            net.close()
            net = None

        if args.only in (None, "placement"):
            net = Network(prefix, 8, 4, args.rate, uplink, args.burst, args.queue, args.mtu)
            lat, _ = measure_latency(net, meshsim, work, 0, 1)
            lat_x, _ = measure_latency(net, meshsim, work, 0, 4)
            print(f"\ntwo-level, 2 leaves x 4 hosts, uplink {uplink}: ping-pong one way {lat * 1e6:.1f} us in a leaf, "
                  f"{lat_x * 1e6:.1f} us across", flush=True)
            topo = write(os.path.join(work, "netns-two-level.yaml"),
                         topology_yaml("netns-two-level", net, rate_bits, uplink_bits, eff, lat / 2,
                                       max(0.0, lat_x - lat)))
            mib = 16
            print(f"\n{'all-reduce 16 MiB along':<28} {'placement':<12} {'predicted':>10} {'measured':>10}",
                  flush=True)
            for group in ("row", "col"):
                res = {}
                for placement in ("natural", "bunched:2x2"):
                    sc = write(os.path.join(work, f"mesh-{group}-{placement.replace(':', '-')}.yaml"), scenario_yaml(
                        "netns-placement", topo,
                        f"collective: allreduce, bytes: {mib}MiB, algorithm: ring, iterations: 3, mesh: 'row=2,col=4', "
                        f"group: {group}", placement))
                    j = run_ranks(net, meshsim, sc, 8, 600)
                    res[placement] = per_op(j)
                    desc = f"{group} (mesh row=2,col=4)"
                    print(f"{desc:<28} {placement:<12} {res[placement][0]:>9.3f}s {res[placement][1]:>9.3f}s",
                          flush=True)
                pr = res["natural"][0] / res["bunched:2x2"][0]
                mr = res["natural"][1] / res["bunched:2x2"][1]
                err = 100.0 * (mr - pr) / pr
                ok = (pr > 1) == (mr > 1) and abs(err) <= tol
                print(f"{'  natural / bunched':<41} {pr:>9.2f}x {mr:>9.2f}x {err:>+7.1f}%{'' if ok else '  MISS'}",
                      flush=True)
                if not ok:
                    failures.append(f"natural/bunched along {group}: predicted {pr:.2f}x, measured {mr:.2f}x")
            net.close()
            net = None
    except RuntimeError as e:
        failures.append(f"run failed: {e}")
    finally:
        if net:
            net.close()
    print(f"\n{len(failures)} failure(s) in {time.monotonic() - t_start:.0f} s", flush=True)
    for f in failures:
        print(f"FAIL: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
