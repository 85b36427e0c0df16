#!/bin/bash
# Which of the authors' switches makes `mnp_official` collapse under noise on CUB (issue 46): the official
# configuration and the same with one switch flipped to `mnp`'s choice, seeds 0-2, one job at a time, test split
# read once (an explanatory re-run, no decision), then the records: results/differences/cub_official/runs.csv.
# usage: bash benchmarks/differences/cub_official_noise.sh LOG_DIR   (from the repo root; MNP_DATA_DIR set)
set -euo pipefail
logs=${1:?usage: cub_official_noise.sh LOG_DIR}
flips=(""
       "dataset.scale_test_separately=false"
       "model.memory.init=data model.memory.trainable=false"
       "model.decoder.sigma_as_std=false"
       "model.decoder.train=true"
       "model.aggregation.view_weighting.mode=distance model.aggregation.view_weighting.quantile=0.9 model.aggregation.view_weighting.power=2.0")
for i in "${!flips[@]}"; do  # a log directory per flip: run directories are named by model, dataset and seed
  # shellcheck disable=SC2086
  MNP_TORCH_THREADS=${MNP_TORCH_THREADS:-1} python train.py -m experiment=paper_main model=mnp_official dataset=cub \
    seed=0,1,2 ${flips[$i]} paths.log_dir="$logs/flip$i" callbacks.checkpoint.every_n_epochs=0
done
python -m mnp.tools.report "$logs"/flip*/paper_main/multiruns --out results/differences/cub_official --no-plots --relabel
