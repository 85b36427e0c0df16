#!/bin/bash
# MGP at the authors' optimiser steps instead of the CPU-cut epochs (issue 46: CUB 100 epochs = 75 % of them, PIE 100 =
# 30 %, Scene15 30 = 8 %), seeds 0-2, one job at a time, the test split read once (an explanatory re-run, no
# decision); records: results/differences/mgp_<dataset>_full/runs.csv, paired with the cell's seeds 0-2.
# usage: bash benchmarks/differences/mgp_full_steps.sh LOG_DIR DATASET EPOCHS   (e.g. cub 133, pie 333, scene15 375)
set -euo pipefail
logs=${1:?usage: mgp_full_steps.sh LOG_DIR DATASET EPOCHS}
dataset=${2:?dataset}
epochs=${3:?epochs}
MNP_TORCH_THREADS=${MNP_TORCH_THREADS:-1} python train.py -m experiment=paper_main model=mgp dataset="$dataset" \
  seed=0,1,2 trainer.max_epochs="$epochs" paths.log_dir="$logs" callbacks.checkpoint.every_n_epochs=0
python -m mnp.tools.report "$logs"/paper_main/multiruns --out "results/differences/mgp_${dataset}_full" --no-plots \
  --relabel
