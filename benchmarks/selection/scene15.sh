#!/bin/bash
# MNP's open Scene15 decisions (results/decisions/open.csv) under the selection protocol (docs/method.md §5.4), on
# the CPU: results/decisions/mnp_scene15.csv. usage: bash benchmarks/selection/scene15.sh [train|decide] LOG_DIR
# train: the defaults and one training setting at a time (modality_mask off, warm-up lr 1e-3, and view dropout 0.25,
# which raised CUB's single views: issue 31 finds Scene15's noisy accuracy capped by its two-view accuracy), seeds
# 0-2 (three, as on PIE: 50-90 min of one CPU core a run, about 6-9 h on 2 cores; resumable, a rerun skips finished
# runs and resumes cut ones from their last checkpoint), two jobs at a time; decide: the screen by val NLL, then
# eq. 8′'s view weighting (q, p) on the chosen setting's checkpoints by val noisy accuracy. On a GPU,
# benchmarks/device/run.sh runs the wider screen of benchmarks/device/jobs.py in minutes.
set -euo pipefail
stage=${1:?train or decide}; logs=${2:?log dir}
export MNP_TORCH_THREADS=1
screen=("" "model.aggregation.modality_mask=false" "model.warmup.lr=0.001" "model.aggregation.view_dropout=0.25")
out=results/decisions/mnp_scene15.csv
if [ "$stage" = train ]; then
  for s in 0 1 2; do for c in "${screen[@]}"; do
    echo "experiment=select model=mnp dataset=scene15 seed=$s paths.log_dir=$logs $c"
  done; done | xargs -P 2 -L 1 python train.py
  exit 0
fi
sel() { python -m mnp.tools.select decide "$logs" --model mnp --dataset scene15 --out $out "$@"; }
sel --decision modality_mask --match model.aggregation.modality_mask=
sel --decision warmup_lr --match model.warmup.lr=
sel --decision view_dropout --match model.aggregation.view_dropout=
# eq. 8′ on the chosen training setting's checkpoints: the defaults' unless the screen changed one (then --base)
python -m mnp.tools.select infer "$logs" --model mnp --dataset scene15 --decision view_weighting \
  --criterion val/noise/acc_mean --higher --out $out
