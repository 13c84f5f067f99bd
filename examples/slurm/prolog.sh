#!/bin/bash
# gpudiag pre-flight check as a Slurm prolog (docs/slurm.md).
#
# slurmd runs this as root on each node of a job before the job starts there (slurm.conf:
# Prolog=/etc/slurm/prolog.d/gpudiag.sh and PrologFlags=Alloc, so it runs when the job is
# allocated, before any step). It checks this node alone within a time budget, against the
# stored baseline and the SKU figures, and acts on the outcome:
#
#   exit 0 from gpudiag (healthy)             -> exit 0: the job starts here
#   exit 1 (a fail finding)                   -> gpudiag has drained this node with its reason
#                                                ("gpudiag: slow_gpu GPU 3 ..."); exit 1, so Slurm
#                                                requeues the job held and it does not run here
#   exit 3 or 4 (inconclusive), or anything   -> logged; exit 0: a check that could not be made
#   else (gpudiag missing, killed, 130)          never drains a node nor holds a job
#
# Settings come from /etc/default/gpudiag-prolog (or the file named by $GPUDIAG_PROLOG_CONFIG),
# a shell fragment that may set:
#   GPUDIAG          the command that runs gpudiag   (default: gpudiag on PATH)
#   GPUDIAG_BUDGET   seconds for the whole check     (default: 60; keep it under PrologEpilogTimeout)
#   GPUDIAG_ARGS     more options, e.g. "--store /var/lib/gpudiag/gpudiag.db --python /opt/torch/bin/python"
#   GPUDIAG_HERE     how the node is reached         (default: --here, this machine; empty with --simulate)
#   GPUDIAG_LOG      where each check's output goes  (default: /var/log/gpudiag/prolog.log)
#   GPUDIAG_SHARED   what to do when another job already runs on the node (OverSubscribe, shared
#                    nodes): skip (default: no load beside a running job) or check
#   GPUDIAG_SLACK    seconds past the budget after which gpudiag is ended (default: 15): inconclusive
#   PATH             the prolog's search path        (slurmd gives a prolog none)
set -u

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUDIAG=gpudiag
GPUDIAG_BUDGET=60
GPUDIAG_ARGS=""
GPUDIAG_HERE=--here
GPUDIAG_LOG=/var/log/gpudiag/prolog.log
GPUDIAG_SHARED=skip
GPUDIAG_SLACK=15
config=${GPUDIAG_PROLOG_CONFIG:-/etc/default/gpudiag-prolog}
# shellcheck source=/dev/null
[ -r "$config" ] && . "$config"
export PATH

node=${SLURMD_NODENAME:-$(hostname -s)}
job=${SLURM_JOB_ID:-none}
mkdir -p "$(dirname "$GPUDIAG_LOG")" 2>/dev/null

log() {
    printf '%s job %s node %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$job" "$node" "$*" >>"$GPUDIAG_LOG" 2>/dev/null
    command -v logger >/dev/null && logger -t gpudiag-prolog -- "job $job node $node: $*"
}

# Another job already on this node (a shared node): the check would load its GPUs. Skip it.
# scontrol listpids asks this node's slurmd about the tasks it runs, never slurmctld (a prolog
# must not load the controller: every node of every job runs it).
if [ "$GPUDIAG_SHARED" = skip ]; then
    others=$(scontrol listpids 2>/dev/null | awk -v job="$job" 'NR > 1 && $2 != job {print $2}' | sort -u | tr '\n' ' ')
    if [ -n "$others" ]; then
        log "skipped: job(s) ${others% } already run on the node (GPUDIAG_SHARED=skip)"
        exit 0
    fi
fi

# The check's own output (plan, findings, the drain it ran, a summary line) goes to the log.
# gpudiag ends by its budget; should it not (a bug, a hung filesystem), timeout ends it GPUDIAG_SLACK s later
# (exit 124, or 137 once killed): inconclusive, before Slurm's PrologEpilogTimeout would count the
# prolog as failed and drain the node for gpudiag's own fault.
limit=$(( ${GPUDIAG_BUDGET%.*} + GPUDIAG_SLACK ))
# shellcheck disable=SC2086  # GPUDIAG and the args are word lists by design
timeout --kill-after=5 "$limit" $GPUDIAG preflight $GPUDIAG_HERE --hosts "$node" --budget "$GPUDIAG_BUDGET" \
    --drain -q $GPUDIAG_ARGS >>"$GPUDIAG_LOG" 2>&1 </dev/null
status=$?

case $status in
    0)
        log "healthy (gpudiag exit 0)"
        exit 0 ;;
    1)
        log "FAILED its pre-flight check (gpudiag exit 1): drained by gpudiag; the job is requeued"
        exit 1 ;;
    *)
        log "inconclusive (gpudiag exit $status): the job starts; nothing drained"
        exit 0 ;;
esac
