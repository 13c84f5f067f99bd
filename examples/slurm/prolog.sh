#!/bin/bash
# gpudiag pre-flight check as a Slurm prolog (docs/slurm.md).
#
# slurmd runs this as root on each node of a job before the job starts there (slurm.conf:
# Prolog=/etc/slurm/prolog.d/gpudiag.sh and PrologFlags=Alloc, so it runs when the job is
# allocated, before any step). It checks this node alone within a time budget, against the
# stored baseline and the SKU figures, and acts on the outcome:
#
#   gpudiag's own FAIL, and this node now     -> exit 1: Slurm requeues the job held, and it does
#   carries gpudiag's drain reason               not run here. Both must hold: gpudiag exited 1 AND
#   ("gpudiag: gemm: slow_gpu GPU 3 ...")        the last line it printed is its own summary
#                                                "gpudiag preflight: FAIL <node>, exit 1, ..." AND
#                                                Slurm (sinfo) shows the node drained with a reason
#                                                starting "gpudiag:"
#   anything else                             -> logged; exit 0: the job starts, nothing is held.
#                                                Healthy (0), inconclusive (3, 4), bad settings (2),
#                                                interrupted (130), ended at its limit (124, 137),
#                                                gpudiag missing, a Python that exits 1 with a
#                                                traceback or a missing module (no summary line), a
#                                                FAIL that drained nothing (its findings ask to
#                                                inspect, or the drain failed): a check that could
#                                                not be made, or acted on, never holds a job
#
# Settings come from /etc/default/gpudiag-prolog (or the file named by $GPUDIAG_PROLOG_CONFIG),
# a shell fragment that may set:
#   GPUDIAG          the command that runs gpudiag   (default: gpudiag on PATH)
#   GPUDIAG_BUDGET   seconds for the whole check     (default: 60; keep it under PrologEpilogTimeout)
#   GPUDIAG_ARGS     more options, e.g. "--store /var/lib/gpudiag/gpudiag.db --python /opt/torch/bin/python"
#                    (not --json -: the summary line must stay the last line of gpudiag's stdout)
#   GPUDIAG_HERE     how the node is reached         (default: --here, this machine; empty with --simulate)
#   GPUDIAG_LOG      where each check's output goes  (default: /var/log/gpudiag/prolog.log)
#   GPUDIAG_SHARED   what to do when another job already runs on the node (OverSubscribe, shared
#                    nodes): skip (default: no load beside a running job) or check
#   GPUDIAG_SLACK    seconds past the budget after which gpudiag is ended (default: 15): inconclusive
#   GPUDIAG_QUERY_S  seconds the node-state query after a FAIL may take (default: 10)
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
GPUDIAG_QUERY_S=10
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

# Whether Slurm now has this node drained with a reason gpudiag wrote: its state and reason asked
# for alone (sinfo %T and %E, "|" between them: the state holds no "|"), never read out of a text
# that a reason could imitate. Sets node_state and node_reason; true when drained by gpudiag.
drained_by_gpudiag() {
    local line
    line=$(timeout -k 2 "$GPUDIAG_QUERY_S" sinfo -h -N -n "$node" -o '%T|%E' 2>/dev/null | head -n 1)
    node_state=${line%%|*}
    node_reason=${line#*|}
    [ -n "$line" ] || node_state="unknown (sinfo did not answer)"
    case $node_state in
        drain*) case $node_reason in gpudiag:*) return 0 ;; esac ;;
    esac
    return 1
}

# The check's own output (plan, findings, the drain it ran, a summary line) goes to the log.
# gpudiag ends by its budget; should it not (a bug, a hung filesystem), timeout ends it GPUDIAG_SLACK s later
# (exit 124, or 137 once killed): inconclusive, before Slurm's PrologEpilogTimeout would count the
# prolog as failed and drain the node for gpudiag's own fault. Its stdout is kept apart until it
# ends, so that its last line, the summary, can be read.
output=$(mktemp -d "${TMPDIR:-/tmp}/gpudiag-prolog.XXXXXX") || {
    log "inconclusive: no temporary folder for the check's output: the job starts; nothing drained"
    exit 0
}
trap 'rm -rf "$output"' EXIT
limit=$(( ${GPUDIAG_BUDGET%.*} + GPUDIAG_SLACK ))
# shellcheck disable=SC2086  # GPUDIAG and the args are word lists by design
timeout --kill-after=5 "$limit" $GPUDIAG preflight $GPUDIAG_HERE --hosts "$node" --budget "$GPUDIAG_BUDGET" \
    --drain -q $GPUDIAG_ARGS >"$output/stdout" 2>"$output/stderr" </dev/null
status=$?
cat "$output/stdout" "$output/stderr" >>"$GPUDIAG_LOG" 2>/dev/null
summary=$(tail -n 1 "$output/stdout")

case $status in
    0)
        log "healthy (gpudiag exit 0)"
        exit 0 ;;
    1)
        case $summary in
            "gpudiag preflight: FAIL $node, exit 1, "*) ;;
            *)
                log "inconclusive (gpudiag exit 1 without its FAIL summary line: Python or gpudiag itself failed," \
                    "see its output above): the job starts; nothing drained"
                exit 0 ;;
        esac
        if drained_by_gpudiag; then
            log "FAILED its pre-flight check (gpudiag exit 1): drained by gpudiag ($node_reason); the job is requeued"
            exit 1
        fi
        log "inconclusive: gpudiag found a FAIL but the node carries no gpudiag drain (state $node_state," \
            "reason: $node_reason): the job starts. $summary"
        exit 0 ;;
    *)
        log "inconclusive (gpudiag exit $status): the job starts; nothing drained"
        exit 0 ;;
esac
