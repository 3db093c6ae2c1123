#!/bin/sh
# Produce the pre-tuned reference logs shipped under templates/logs/cpu/ (see README there).
# Usage: sh logs/pretune.sh [N_TRIAL]   (appends to logs/pretune/*.log; then run
#   templtune log pick on each and concatenate the best records into templates/logs/cpu/x86.log)
set -e
N=${1:-48}
mkdir -p logs/pretune
tune() {  # template args
  python3 -m templtune.cli tune --template "$1" --args "$2" --tuner xgb --n-trial "$N" \
    --early-stopping $((N / 2)) --seed 0 --number 3 --repeat 2 --no-progress \
    --log "logs/pretune/$1_$(echo "$2" | tr , _).log"
}
tune conv2d_nchw 1,7,7,512,512,3,3,1,1
tune dense 1,1000,512
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,4
tune conv2d_nchw 1,56,56,64,64,3,3,1,1
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,4
tune dense 1,1000,2048
tune conv2d_nchw 1,224,224,64,3,7,7,2,3
tune conv2d_winograd 1,7,7,512,512,3,3,1,1,2
tune conv2d_winograd 1,56,56,64,64,3,3,1,1,2
tune dense 1024,1024,1024
