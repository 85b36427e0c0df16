#!/bin/bash
# MNP's Scene15 defaults under the selection protocol (docs/method.md §5.4), as run for
# results/decisions/mnp_scene15.csv (session 15). usage: bash benchmarks/selection/scene15.sh STAGE LOG_DIR
# train: the defaults and one training setting at a time (modality_mask off, warm-up lr 1e-3, and view dropout 0.25,
# which raised CUB's single views), seeds 0-2, two jobs at a time (20-90 min of one CPU core a run; resumable, a
# rerun skips finished runs and resumes cut ones from their last checkpoint); official: mnp_official's selection
# runs, seeds 0-2, and the decision `configuration`: the authors' whole configuration against the screen's choice
# (view dropout); decide, after both: the screen by val NLL (its rows "screen (configuration decides)"), the
# configuration, then eq. 8′'s view weighting by val noisy accuracy on the chosen configuration's checkpoints
# (mnp_official's: infer --from-model) over a wider grid than elsewhere; samples: the decoder's S at prediction by
# val NLL on the same checkpoints. On a GPU, benchmarks/device/run.sh runs such screens in minutes.
stages="train samples official decide"
source "$(dirname "$0")/lib.sh" "$@"
out=results/decisions/mnp_scene15.csv
chosen=model.aggregation.view_dropout=0.25  # the screen's choice (decision view_dropout)
from=(--from-model mnp_official --note "on the chosen configuration's checkpoints (mnp_official's runs: select infer --from-model mnp_official)")
if [ "$stage" = samples ]; then samples scene15 "${from[@]}"; exit 0; fi
if [ "$stage" = official ]; then official scene15 "0 1 2" --base "$chosen"; exit 0; fi
if [ "$stage" = train ]; then
  screen_train scene15 "0 1 2" "" "model.aggregation.modality_mask=false" "model.warmup.lr=0.001" "$chosen"
  exit 0
fi
screen="screen (configuration decides)"
decide scene15 --decision modality_mask --match model.aggregation.modality_mask= --status "$screen"
decide scene15 --decision warmup_lr --match model.warmup.lr= --status "$screen"
decide scene15 --decision view_dropout --match model.aggregation.view_dropout= --status "$screen"
decide scene15 --decision configuration --rival mnp_official --base "$chosen"
# at σ = 1 a noised Scene15 view sits at 5.6 times the training rows' median d² but below the q = 0.99 reference
# (docs/diagnosis.md, benchmarks/view_conflict_scene15.json), so lower q and higher p are candidates
weighting scene15 --quantiles 0.5 0.75 0.9 0.99 1 --powers 0.5 1 2 4 "${from[@]}"
