#!/bin/bash
# MNP's open Scene15 decisions (results/decisions/open.csv) under the selection protocol (docs/method.md §5.4), on
# the CPU: results/decisions/mnp_scene15.csv. usage: bash benchmarks/selection/scene15.sh STAGE LOG_DIR [CHOSEN]
# train: the defaults and one training setting at a time (modality_mask off, warm-up lr 1e-3, and view dropout 0.25,
# which raised CUB's single views: issue 31 finds Scene15's noisy accuracy capped by its two-view accuracy), seeds
# 0-2 (three, as on PIE: 50-90 min of one CPU core a run, about 6-9 h on 2 cores; resumable, a rerun skips finished
# runs and resumes cut ones from their last checkpoint), two jobs at a time; decide: the screen by val NLL, then
# eq. 8′'s view weighting (q, p) on the chosen setting's checkpoints by val noisy accuracy; samples, then official:
# the decoder's S at prediction on those checkpoints, and mnp_official's whole configuration against them, seeds
# 0-2. CHOSEN: the screen's chosen variant (e.g. model.aggregation.view_dropout=0.25), if it chose one. On a GPU,
# benchmarks/device/run.sh runs the wider screen of benchmarks/device/jobs.py (while open.csv lists these) in minutes.
source "$(dirname "$0")/lib.sh" "$@"
out=results/decisions/mnp_scene15.csv
chosen=(${3:+--base "$3"})
if [ "$stage" = samples ]; then samples scene15 "${chosen[@]}"; exit 0; fi
if [ "$stage" = official ]; then official scene15 "0 1 2" "${chosen[@]}"; exit 0; fi
if [ "$stage" = train ]; then
  screen_train scene15 "0 1 2" "" "model.aggregation.modality_mask=false" "model.warmup.lr=0.001" \
    "model.aggregation.view_dropout=0.25"
  exit 0
fi
decide scene15 --decision modality_mask --match model.aggregation.modality_mask=
decide scene15 --decision warmup_lr --match model.warmup.lr=
decide scene15 --decision view_dropout --match model.aggregation.view_dropout=
# on the chosen setting's checkpoints (the defaults' unless the screen chose a variant: CHOSEN), over a wider grid
# than elsewhere: at σ = 1 a noised Scene15 view sits at 5.6 times the training rows' median d² but below the q = 0.99
# reference (docs/diagnosis.md, benchmarks/view_conflict_scene15.json), so lower q and higher p are candidates
weighting scene15 --quantiles 0.5 0.75 0.9 0.99 1 --powers 0.5 1 2 4 "${chosen[@]}"
