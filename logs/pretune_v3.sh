#!/bin/sh
# Pre-tuned reference logs for the workloads added or changed in session 2 (issue 5): the
# width-vectorized direct conv2d (conv2d_nchw_wvec), Winograd with blocked pre-transformed
# weights (kblock), the batch-1 dense GEMV path and dense 1024^3 with prepacked weights.
# Budget: XGB, N (default 32) trials per workload, early stopping at half, seed 0, number 3 x
# repeat 2, 1 thread (the runner pins glibc's allocator itself now). Then:
#   python3 logs/distill.py
#   python3 logs/rerank.py logs/pretune/*.log   (re-times the 6 best of each, interleaved;
#   this session re-ranked every raw log that way)
# Usage: sh logs/pretune_v3.sh [N]   (delete the raw logs first: each run appends)
set -e
N=${1:-32}
export TEMPLTUNE_NUM_THREADS=1
mkdir -p logs/pretune
tune() {  # template args n_trial
  python3 -m templtune.cli tune --template "$1" --args "$2" --tuner xgb --n-trial "$3" \
    --early-stopping $(($3 / 2)) --seed 0 --number 3 --repeat 2 --no-progress \
    --log "logs/pretune/$1_$(echo "$2" | tr , _).log"
}
tune conv2d_nchw_wvec 1,224,224,64,3,7,7,2,3 "$N"
tune conv2d_nchw_wvec 1,56,56,64,64,3,3,1,1 "$N"
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,2,8 "$N"
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,4,8 "$N"
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,4,16 "$N"
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,2,16 "$N"
tune dense 1,1000,512 "$N"
tune dense 1,1000,2048 "$N"
tune dense 1024,1024,1024,16 48
# dense 1024,1024,1024 got 96 more trials (XGB, seed 1, number 2) on top of its earlier raw log.
