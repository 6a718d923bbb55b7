#!/usr/bin/env python3
"""The sustained tensor-core rate of this GPU, as a training job sees it (docs/compute.md).

meshsim's h100 and h200 presets run tensor-core work at `sustained_tensor` of the burst rate
(0.897 and 0.920), the mean of calibrate's 8192^3 and 16384^3 bf16 points, which are timed
after only seconds of load. This script runs back-to-back bf16 GEMMs for minutes, as a job
does, and prints the rate in each window next to the preset's burst figure for the same shape,
with the SM clock and power nvidia-smi reports, so that a GPU session can say which fraction a
job holds once the power cap has settled.

    python3 tools/gpu/sustained_gemm.py --seconds 180 --window 10 [--size 8192] [--burst-tflops 740.5]

The last line is `sustained: RATIO of the burst figure over the last HALF of the run (N windows)`;
acceptance.sh reads it. Exit 77 (skip) without PyTorch or a CUDA device. Uses PyTorch (on the
GPU machine as a wheel), not meshsim's own code: the reference the brief names for measuring.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import time

# The h100 preset's burst figure for an n^3 bf16 GEMM (meshsim calibrate's preset column,
# docs/validation/gpu-h100.md): 8192^3 740.5 TFLOP/s, 16384^3 757.0.
BURST_TFLOPS = {8192: 740.5, 16384: 757.0}


def smi_sample():
    """(SM clock MHz, power W) from nvidia-smi, or (None, None) where it is missing."""
    if not shutil.which("nvidia-smi"):
        return None, None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=True).stdout.strip().split(",")
        return float(out[0]), float(out[1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=180, help="how long to keep the tensor cores busy")
    ap.add_argument("--window", type=float, default=10, help="seconds per reported window")
    ap.add_argument("--size", type=int, default=8192, help="n of the n^3 bf16 GEMM")
    ap.add_argument("--burst-tflops", type=float, default=None,
                    help="the preset's burst figure for this shape (default: the h100 preset's)")
    a = ap.parse_args()
    if not (a.seconds > 0 and a.window > 0 and a.size >= 256):
        sys.exit("sustained_gemm: --seconds and --window must be positive and --size at least 256")
    burst = a.burst_tflops or BURST_TFLOPS.get(a.size)
    if burst is None:
        sys.exit(f"sustained_gemm: no preset figure for {a.size}^3; give --burst-tflops")
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError:
        print("sustained_gemm: skipped: PyTorch is not installed here")
        sys.exit(77)
    if not torch.cuda.is_available():
        print("sustained_gemm: skipped: no CUDA device")
        sys.exit(77)

    n = a.size
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)  # random data, never zeros
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * n * n * n
    for _ in range(5):  # warm-up: handles, kernel choice
        torch.matmul(x, w, out=out)
    torch.cuda.synchronize()
    ref = (x[:64].float() @ w[:, :64].float())
    err = ((out[:64, :64].float() - ref).norm() / ref.norm()).item()
    if not err < 1e-2:
        sys.exit(f"sustained_gemm: the bf16 GEMM is wrong (relative error {err:.3g} against fp32)")

    print(f"device: {torch.cuda.get_device_name(0)}; {n}^3 bf16 GEMMs back to back for {a.seconds:.0f} s; "
          f"burst figure {burst} TFLOP/s; relative error {err:.2e}")
    print(f"{'t (s)':>8} {'TFLOP/s':>9} {'of burst':>9} {'SM MHz':>7} {'W':>6}")
    ratios = []
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        count = 0
        w_start = time.perf_counter()
        while time.perf_counter() - w_start < a.window:
            for _ in range(20):
                torch.matmul(x, w, out=out)
            count += 20
            torch.cuda.synchronize()  # keeps the host from running ahead of the window
        t1.record()
        torch.cuda.synchronize()
        secs = t0.elapsed_time(t1) / 1e3
        rate = flops * count / secs / 1e12
        ratios.append(rate / burst)
        clock, power = smi_sample()
        print(f"{time.perf_counter() - start:8.1f} {rate:9.1f} {rate / burst:9.3f} "
              f"{clock if clock is not None else '-':>7} {power if power is not None else '-':>6}", flush=True)
    half = ratios[len(ratios) // 2:] or ratios
    print(f"sustained: {statistics.mean(half):.3f} of the burst figure over the last half of the run "
          f"({len(half)} windows; first window {ratios[0]:.3f})")


if __name__ == "__main__":
    main()
