#!/bin/bash
# MNP's defaults on Handwritten under the selection protocol (docs/method.md §5.4), as run for
# results/decisions/mnp_handwritten.csv. usage: bash benchmarks/selection/handwritten.sh [train|decide] LOG_DIR
# train: the one-at-a-time screen of benchmarks/device/jobs.py, seeds 0-4, two jobs at a time (2-6 min a run on this
# 2-core CPU; about 1 h in all); decide: the records by val NLL. Screen winners are marked for a stage 2 (the winners
# together against the defaults, as on CUB), and eq. 8′'s view weighting is then decided on the chosen setting's
# checkpoints (mnp.tools.select infer), as in cub.sh.
set -euo pipefail
stage=${1:?train or decide}; logs=${2:?log dir}
export MNP_TORCH_THREADS=1
out=results/decisions/mnp_handwritten.csv
if [ "$stage" = train ]; then
  python3 benchmarks/device/jobs.py select | grep "dataset=handwritten" | sed "s|$| paths.log_dir=$logs|" | \
    xargs -P 2 -L 1 python train.py
  exit 0
fi
sel() { python -m mnp.tools.select decide "$logs" --model mnp --dataset handwritten --out $out "$@"; }
sel --decision warmup_lr --match model.warmup.lr=
sel --decision lengthscale_form --match model.attention.lengthscale_form=
sel --decision projection --match model.encoder.projection=
for d in modality_mask:aggregation.modality_mask warmup_epochs:warmup.epochs; do
  sel --decision ${d%%:*} --match model.${d#*:}= --status "screen (stage 2 decides)"; done
