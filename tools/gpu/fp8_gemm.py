#!/usr/bin/env python3
"""FP8 against bf16 GEMMs on this GPU, burst and sustained (docs/compute.md, "FP8").

meshsim's h100/h200 presets time FP8 GEMMs at 1978.9 TFLOP/s x gemm_efficiency_fp8 (0.814, a
published cuBLASLt measurement) and assume FP8 holds bf16's sustained fraction of its burst rate
under the power cap. This script measures both here with PyTorch (the reference the brief
names): n^3 GEMMs in bf16 (torch.matmul) and in e4m3 with per-tensor scales and bf16 output
(torch._scaled_mm, cuBLASLt's FP8 path), first in short bursts, then back to back for
--seconds each, with the SM clock and power nvidia-smi reports per window.

    python3 tools/gpu/fp8_gemm.py --seconds 60 --window 5 --sizes 4096,8192,16384

Prints one line per measurement and ends with `fp8 sustained/burst R16 (bf16 R8)` lines.
Exit 77 without PyTorch, a CUDA device or FP8 support.
"""
import argparse
import shutil
import statistics
import subprocess
import sys
import time


def smi():
    if not shutil.which("nvidia-smi"):
        return None, None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=10, check=True).stdout
        a, b = out.strip().split(",")[:2]
        return float(a), float(b)
    except (subprocess.SubprocessError, ValueError):
        return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--window", type=float, default=5)
    ap.add_argument("--sizes", default="4096,8192,16384")
    ap.add_argument("--sustained-size", type=int, default=8192)
    a = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("fp8_gemm: no PyTorch here", file=sys.stderr)
        return 77
    if not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        print("fp8_gemm: no CUDA device or no FP8 GEMM in this PyTorch", file=sys.stderr)
        return 77
    dev = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuda {torch.version.cuda}")

    def ops(n, dtype):
        x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        if dtype == "bf16":
            return lambda: torch.matmul(x, w)
        xa = x.to(torch.float8_e4m3fn)
        wb = w.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major second operand (cuBLASLt's TN)
        one = torch.ones((), device=dev, dtype=torch.float32)
        return lambda: torch._scaled_mm(xa, wb, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    def rate(f, n, iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            f()
        end.record()
        end.synchronize()
        return 2.0 * n ** 3 * iters / (start.elapsed_time(end) / 1e3) / 1e12

    burst = {}
    for n in [int(s) for s in a.sizes.split(",")]:
        for dtype in ("bf16", "fp8"):
            f = ops(n, dtype)
            for _ in range(10):
                f()
            torch.cuda.synchronize()
            iters = max(10, int(2e13 / (2 * n ** 3)))  # about 20 TFLOP of work: tens of ms
            r = max(rate(f, n, iters) for _ in range(3))
            burst[(n, dtype)] = r
            print(f"burst {dtype} {n}^3: {r:.1f} TFLOP/s")

    n = a.sustained_size
    for dtype in ("bf16", "fp8"):
        f = ops(n, dtype)
        per_window = max(1, int(burst[(n, dtype)] * 1e12 * a.window / (2 * n ** 3)))
        rates = []
        t0 = time.time()
        while time.time() - t0 < a.seconds:
            r = rate(f, n, per_window)
            clock, power = smi()
            rates.append(r)
            print(f"sustained {dtype} {n}^3 t={time.time() - t0:5.1f}s: {r:.1f} TFLOP/s, SM {clock} MHz, {power} W")
        half = rates[len(rates) // 2:]
        mean = statistics.mean(half)
        print(f"{dtype} sustained/burst {mean / burst[(n, dtype)]:.3f} ({mean:.1f} of {burst[(n, dtype)]:.1f} TFLOP/s, "
              f"last {len(half)} windows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
