#!/usr/bin/env bash
# The tuning studies of issue 44 (docs/tuning.md), declared before their first run: every model below, on each dataset
# given, with the one budget of conf/hydra/sweeper/mnp_tune.yaml (20 finished trials of 5 stratified folds, mean fold
# val/nll, TPE, median pruning after 2 folds, trial 0 = the model's defaults). mnp_official stays the authors' own.
#   bash benchmarks/tuning/studies.sh <log dir> <queue: a|b|all> <dataset>...
# Queues a and b split the models so that two processes share a 2-core machine (MNP_TORCH_THREADS=1). Re-running the
# same command resumes every study where it stopped; a study whose budget is spent runs its seed check (3 candidates x
# 2 seeds x 5 folds, declared later for every study alike, docs/tuning.md), and then no job. CUB and PIE run here.
# Handwritten and Scene15 (declared before any of their runs) run on a lent GPU machine, every model alike, with
# benchmarks/device/tune_studies.py: the same 20 trials x 5 folds, TPE, trial 0 = the defaults, mean fold val/nll, but
# a trial's 5 folds train at once (hydra.sweeper.parallel_folds=true launcher=joblib trainer=gpu), so without median
# pruning (hydra.sweeper.prune_after=0): pruning needs a trial's folds one after another. Here they would cost too much:
# a default run of MNP takes a median 336 s on Handwritten and 972 s on Scene15, MGP 257 s and 119 s (time/total_s,
# results/paper_main/runs.csv), and a study is 100 fold runs (docs/tuning.md). This script refuses them.
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
  case $dataset in handwritten|scene15)
    echo "error: the $dataset studies run on a GPU machine: python3 benchmarks/device/tune_studies.py --datasets $dataset" >&2
    exit 1 ;;
  esac
done
for dataset in "$@"; do
  for model in $models; do
    echo "== $(date -Is) study $model on $dataset"
    python train.py -m experiment=tune model="$model" dataset="$dataset" paths.log_dir="$log_dir" \
      || echo "== study $model on $dataset ended with status $? (a failed trial is recorded in its trials.csv)"
  done
done
