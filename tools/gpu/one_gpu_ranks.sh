#!/usr/bin/env bash
# Several ranks of a meshsim command on ONE GPU through NCCL (tools/gpu/acceptance.sh):
#
#   tools/gpu/one_gpu_ranks.sh MESHSIM N ARGS...    # = MESHSIM launch -n N -- MESHSIM ARGS
#
# NCCL refuses two ranks of one communicator on the same GPU of one host ("Duplicate GPU
# detected"). Each rank therefore names a host of its own (NCCL_HOSTID), and NCCL connects
# the ranks as it would across nodes: its socket transport, here over loopback. Every rank
# picks GPU (local rank mod GPUs) = 0 (backend/cuda/device.h). What this shows is that NCCL
# accepts the communicators, splits and point-to-point order the cuda backend issues, and
# that the data arrive; timings are loopback's, not NVLink's.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: one_gpu_ranks.sh MESHSIM N ARGS..." >&2; exit 2; }
meshsim="$1"
n="$2"
shift 2
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_NET=Socket
exec "$meshsim" launch -n "$n" -- sh -c 'NCCL_HOSTID="meshsim-rank-$MESHSIM_RANK" exec "$0" "$@"' "$meshsim" "$@"
