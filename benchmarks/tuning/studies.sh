#!/usr/bin/env bash
# The tuning studies of issue 44 (docs/tuning.md), declared before their first run: every model below, on each dataset
# given, with the one budget of conf/hydra/sweeper/mnp_tune.yaml (20 finished trials of 5 stratified folds, mean fold
# val/nll, TPE, median pruning after 2 folds, trial 0 = the model's defaults). mnp_official stays the authors' own.
#   bash benchmarks/tuning/studies.sh <log dir> <queue: a|b|all> <dataset>...
# Queues a and b split the models so that two processes share a 2-core machine (MNP_TORCH_THREADS=1). Re-running the
# same command resumes every study where it stopped; a finished study runs no job.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ -f train.py ] || { echo "error: run from a checkout of the project (train.py not found)" >&2; exit 1; }
[ $# -ge 3 ] || { echo "usage: bash benchmarks/tuning/studies.sh <log dir> <a|b|all> <dataset>..." >&2; exit 1; }
log_dir=$1; queue=$2; shift 2
case $queue in
  a) models="etp mcd sngp mgp" ;;
  b) models="tmc de_lf de_ef mnp" ;;
  all) models="etp tmc mcd de_lf sngp de_ef mgp mnp" ;;
  *) echo "error: unknown queue '$queue'; choose a, b or all" >&2; exit 1 ;;
esac
for dataset in "$@"; do
  for model in $models; do
    echo "== $(date -Is) study $model on $dataset"
    python train.py -m experiment=tune model="$model" dataset="$dataset" paths.log_dir="$log_dir" \
      || echo "== study $model on $dataset ended with status $? (a failed trial is recorded in its trials.csv)"
  done
done
