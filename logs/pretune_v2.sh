#!/bin/sh
# Pre-tuned reference logs, regenerated after the x86 template rework (NCHWc conv2d_nchw,
# unrolled Winograd transforms, 8-lane prepacked conv weights). Replaces the earlier raw logs of
# these workloads; the batch-1 dense ones (pretune.sh, pretune_prepacked.sh) are kept.
# Budget: XGB, N_CONV (default 128) trials per direct conv2d, N (default 64) for the others,
# early stopping at half the budget, seed 0, number 3 x repeat 2. Then: python3 logs/distill.py
# Usage: [ONLY=conv2d_nchw] sh logs/pretune_v2.sh [N] [N_CONV]  (delete the template's old raw
# logs first: each run appends)
# Measured on one thread (the machine's 2 cores are shared, so 2-thread timings are mostly
# noise) and with glibc's mmap/trim thresholds pinned (see benchmarks/ops.py: otherwise every
# call page-faults its scratch buffers in again, which swamps the differences between configs).
set -e
N=${1:-64}
N_CONV=${2:-128}
export TEMPLTUNE_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=268435456
mkdir -p logs/pretune
tune() {  # template args n_trial (skipped unless the template matches $ONLY, default all)
  case "$1" in ${ONLY:-*}) ;; *) return 0 ;; esac
  python3 -m templtune.cli tune --template "$1" --args "$2" --tuner xgb --n-trial "$3" \
    --early-stopping $(($3 / 2)) --seed 0 --number 3 --repeat 2 --no-progress \
    --log "logs/pretune/$1_$(echo "$2" | tr , _).log"
}
tune conv2d_nchw 1,7,7,512,512,3,3,1,1 "$N_CONV"
tune conv2d_nchw 1,56,56,64,64,3,3,1,1 "$N_CONV"
tune conv2d_nchw 1,224,224,64,3,7,7,2,3 "$N_CONV"
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,2 "$N"
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,4 "$N"
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,2 "$N"
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,4 "$N"
tune conv2d_nchw 1,7,7,512,512,3,3,1,1,8 "$N"
tune conv2d_nchw 1,56,56,64,64,3,3,1,1,8 "$N"
tune conv2d_nchw 1,224,224,64,3,7,7,2,3,8 "$N"
tune dense 1024,1024,1024 "$N"
