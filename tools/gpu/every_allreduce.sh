#!/usr/bin/env bash
# Every all-reduce algorithm of the registry, run for real with its numerics checked
# (tools/gpu/acceptance.sh step 15):
#
#   tools/gpu/every_allreduce.sh MESHSIM N TOPOLOGY [RUN ARGS...]
#
# every_algorithm.sh --kinds allreduce, its verdict line starting "every_allreduce: PASS".
EVERY_NAME=every_allreduce exec "$(cd "$(dirname "$0")" && pwd)/every_algorithm.sh" --kinds allreduce "$@"
