#!/bin/bash
# MNP's defaults on Handwritten under the selection protocol (docs/method.md §5.4), as run for
# results/decisions/mnp_handwritten.csv. usage: bash benchmarks/selection/handwritten.sh [train|decide|official|samples] LOG_DIR
# train: the one-at-a-time screen of benchmarks/device/jobs.py, seeds 0-4, then stage 2, the screen's two winners
# together, two jobs at a time (2-6 min a run on this 2-core CPU; about 1 h 20 min in all); decide: the records by
# val NLL (the screen, then stage 2 against the defaults), then eq. 8′'s view weighting on the chosen setting's
# checkpoints (mnp.tools.select infer; about 20 min), as in cub.sh; official, run after decide: mnp_official's
# whole configuration against the chosen joint setting, seeds 0-4 (3-6 min a run); samples: the decoder's S at
# prediction on the joint setting's checkpoints.
stages="train samples official decide"
source "$(dirname "$0")/lib.sh" "$@"
out=results/decisions/mnp_handwritten.csv
joint="model.aggregation.modality_mask=false model.warmup.epochs=0"
joint_variant="model.aggregation.modality_mask=false,model.warmup.epochs=0"
if [ "$stage" = samples ]; then samples handwritten --base "$joint_variant"; exit 0; fi
if [ "$stage" = official ]; then official handwritten "0 1 2 3 4" --base "$joint_variant"; exit 0; fi
if [ "$stage" = train ]; then
  python3 benchmarks/device/jobs.py screen handwritten | sed "s|$| paths.log_dir=$logs|" | \
    xargs -P 2 -L 1 python train.py
  screen_train handwritten "0 1 2 3 4" "$joint"
  exit 0
fi
sel() { decide handwritten "$@"; }
# stage 1: the screen (the joint runs are not its candidates)
sel --decision warmup_lr --match model.warmup.lr= --exclude $joint_variant
sel --decision lengthscale_form --match model.attention.lengthscale_form= --exclude $joint_variant
sel --decision projection --match model.encoder.projection= --exclude $joint_variant
for d in modality_mask:aggregation.modality_mask warmup_epochs:warmup.epochs; do
  sel --decision ${d%%:*} --match model.${d#*:}= --exclude $joint_variant --status "screen (stage 2 decides)"; done
# stage 2: the screen's winners together against the defaults
sel --decision joint --match $joint_variant
# eq. 8′ on the chosen training setting's checkpoints (stage 2 chose the joint setting)
weighting handwritten --base "$joint_variant"
