#!/bin/sh
# Pre-tuned reference logs, second part: the prepacked-weight variants benchmarks/ops.py times.
set -e
N=${1:-40}
mkdir -p logs/pretune
tune() {  # template args
  python3 -m templtune.cli tune --template "$1" --args "$2" --tuner xgb --n-trial "$N" \
    --early-stopping $((N / 2)) --seed 0 --number 3 --repeat 2 --no-progress \
    --log "logs/pretune/$1_$(echo "$2" | tr , _).log"
}
tune dense 1,1000,512,40
tune dense 1,1000,2048,40
tune conv2d_nchw 1,7,7,512,512,3,3,1,1,16
tune conv2d_nchw 1,56,56,64,64,3,3,1,1,16
tune conv2d_nchw 1,224,224,64,3,7,7,2,3,16
