#!/bin/bash
# MNP's defaults on PIE under the selection protocol (docs/method.md §5.4), as run for results/decisions/mnp_pie.csv.
# usage: bash benchmarks/selection/pie.sh [train|decide|official|samples] LOG_DIR   (from the repo root; MNP_DATA_DIR set)
# train: one training setting at a time against the defaults, seeds 0-2, two jobs at a time (about 8 min of one
# CPU core a run; three seeds, not five as on CUB: the CPU budget of one session); decide: the records (the screen by val NLL, then eq. 8′'s view weighting on the chosen
# setting's checkpoints by val noisy accuracy); official: mnp_official's whole configuration against the defaults,
# seeds 0-2; samples: the decoder's S at prediction on the defaults' checkpoints.
stages="train samples official decide"
source "$(dirname "$0")/lib.sh" "$@"
paper_rbf="model.loss.rbf_reduce=mean model.loss.lengthscale_penalty=norm model.loss.self_in_denominator=false"
out=results/decisions/mnp_pie.csv
if [ "$stage" = samples ]; then samples pie; exit 0; fi
if [ "$stage" = official ]; then official pie "0 1 2"; exit 0; fi
if [ "$stage" = train ]; then
  screen_train pie "0 1 2" "" "$paper_rbf" "model.warmup.lr=0.001" "model.aggregation.modality_mask=true"
  exit 0
fi
decide pie --decision rbf_reduce --match model.loss.rbf_reduce=
decide pie --decision warmup_lr --match model.warmup.lr=
decide pie --decision modality_mask --match model.aggregation.modality_mask=
weighting pie  # on the defaults' checkpoints (the screen kept every training default)
