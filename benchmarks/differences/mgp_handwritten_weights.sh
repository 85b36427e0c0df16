#!/bin/bash
# Why MGP's Handwritten ECE (0.019) is three times the paper's 0.006 (issue 46): the paper_main rows predate the fix
# of the entropy weights (baselines/mgp.py:entropy_weights), so MGP is re-run at today's code and with its test-time
# product of experts weighted each other way the official code offers (training is the same: train_weighting stays
# uniform), seeds 0-2, one job at a time, the test split read once (an explanatory re-run, no decision); records:
# results/differences/mgp_handwritten_weights/runs.csv, paired with the cell's seeds 0-2.
# usage: bash benchmarks/differences/mgp_handwritten_weights.sh LOG_DIR   (from the repo root; MNP_DATA_DIR set)
set -euo pipefail
logs=${1:?usage: mgp_handwritten_weights.sh LOG_DIR}
flips=("" "model.test_weighting=softmax_entropy" "model.test_weighting=uniform")
for i in "${!flips[@]}"; do  # a log directory per flip: run directories are named by model, dataset and seed
  # shellcheck disable=SC2086
  MNP_TORCH_THREADS=${MNP_TORCH_THREADS:-1} python train.py -m experiment=paper_main model=mgp dataset=handwritten \
    seed=0,1,2 ${flips[$i]} paths.log_dir="$logs/flip$i" callbacks.checkpoint.every_n_epochs=0
done
python -m mnp.tools.report "$logs"/flip*/paper_main/multiruns --out results/differences/mgp_handwritten_weights \
  --no-plots --relabel
