#!/bin/bash
# scalelab array of 3 runs of experiment e0123456789: rendered by scalelab; each task is a run of its own, started by its own batch script.
#SBATCH --job-name=scalelab-array-0123456789
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=16
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --time=1-00:00:00
#SBATCH --partition=gpu
#SBATCH --account=ml-scaling
#SBATCH --signal=USR1@120
#SBATCH --requeue
#SBATCH --constraint=h100
#SBATCH --qos=high
#SBATCH --output=/dev/null
#SBATCH --array=0-2%2
set -euo pipefail
# The run this task is, by the task's index.
case "${SLURM_ARRAY_TASK_ID:-}" in
    0) run_id=0123456789; run_dir=/shared/scalelab/runs/0123456789 ;;
    1) run_id=1123456789; run_dir=/shared/scalelab/runs/1123456789 ;;
    2) run_id=2123456789; run_dir=/shared/scalelab/runs/2123456789 ;;
    *)
        echo "scalelab: array task '${SLURM_ARRAY_TASK_ID:-}' is none of this array's runs" >&2
        exit 1
        ;;
esac
# As a job of the run's own would: its output appended to the run's output.log (a requeued task appends
# again), in the run's directory, running the run's own script (its #SBATCH lines are comments to bash).
exec >>"$run_dir"/output.log 2>&1
cd -- "$run_dir"
echo "scalelab: run $run_id is task ${SLURM_ARRAY_TASK_ID} of array job ${SLURM_ARRAY_JOB_ID:-}"
exec bash -- "$run_dir"/job.sbatch
