#!/bin/sh
# Pre-tuned reference logs, third part: the Winograd workloads (pre-transformed kernels).
set -e
N=${1:-32}
mkdir -p logs/pretune
tune() {  # template args
  python3 -m templtune.cli tune --template "$1" --args "$2" --tuner xgb --n-trial "$N" \
    --early-stopping $((N / 2)) --seed 0 --number 3 --repeat 2 --no-progress \
    --log "logs/pretune/$1_$(echo "$2" | tr , _).log"
}
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,2
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,4
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,4
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,2
