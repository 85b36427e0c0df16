#!/bin/bash
# Is Scene15's lead over the paper (every model 8-14 points above it, issue 46) the data pipeline? ETP (the cheapest
# baseline, +7.1 points) with one data switch flipped at a time: the authors' test-only scaling, no scaling, a
# stratified split drawn from the seed instead of the index files; seeds 0-2, one job at a time, the test split read
# once (an explanatory re-run, no decision); records: results/differences/scene15_etp/runs.csv.
# usage: bash benchmarks/differences/scene15_preprocessing.sh LOG_DIR   (from the repo root; MNP_DATA_DIR set)
set -euo pipefail
logs=${1:?usage: scene15_preprocessing.sh LOG_DIR}
flips=("dataset.scale_test_separately=true" "dataset.scaling=none" "dataset.split=stratified")
for i in "${!flips[@]}"; do  # a log directory per flip: run directories are named by model, dataset and seed
  MNP_TORCH_THREADS=${MNP_TORCH_THREADS:-1} python train.py -m experiment=paper_main model=etp dataset=scene15 \
    seed=0,1,2 "${flips[$i]}" paths.log_dir="$logs/flip$i" callbacks.checkpoint.every_n_epochs=0
done
python -m mnp.tools.report "$logs"/flip*/paper_main/multiruns --out results/differences/scene15_etp --no-plots --relabel
