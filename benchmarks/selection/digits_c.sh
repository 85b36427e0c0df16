#!/bin/bash
# MNP's warm-up on Digits-C (the offline CIFAR10-C stand-in) under the selection protocol (docs/method.md §5.4), as
# run for results/decisions/mnp_digits_c.csv: today's 2 warm-up epochs (17 in all) against the official CIFAR10-C
# script's 30 (45 in all). usage: bash benchmarks/selection/digits_c.sh [train|decide] LOG_DIR
# train: seeds 0-4, two jobs at a time (2-6 min a run on this 2-core CPU, after a first run builds the features);
# decide: by val NLL (the validation rows hold no OOD set, so OOD AUROC cannot decide). Eq. 8′ is not decided here:
# Digits-C keeps the paper's eq. 8, and at 17 epochs experiment=select's last.ckpt (every 5) is not the end state.
stages="train decide"
source "$(dirname "$0")/lib.sh" "$@"
out=results/decisions/mnp_digits_c.csv
if [ "$stage" = train ]; then
  screen_train digits_c "0 1 2 3 4" "" "model.warmup.epochs=30 trainer.max_epochs=45"
  exit 0
fi
decide digits_c --decision warmup_epochs --match model.warmup.epochs=
