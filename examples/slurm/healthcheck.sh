#!/bin/bash
# gpudiag as a Slurm HealthCheckProgram (docs/slurm.md).
#
# slurmd runs this as root every HealthCheckInterval seconds on the nodes HealthCheckNodeState
# names. Use HealthCheckNodeState=IDLE: the check loads the GPUs, so it must never run beside a
# job (IDLE also covers an idle node that is drained, which is how a node gpudiag drained gets
# back). As a second guard it does nothing when Slurm says a job holds this node.
#
#   a fail finding      -> gpudiag drains this node with its reason ("gpudiag: gemm: ...": the
#                          checks that drained it, then the finding)
#   the node passes     -> if gpudiag drained it before this check began and this check made, and
#                          the node passed, each check its reason names, it is returned to service
#                          (NHC's rule); a node drained for a check this run could not make (links,
#                          in a one-node check), drained while it ran, or by anyone else (any reason
#                          without gpudiag's own drain marker, "gpudiag-drain=...") stays drained,
#                          and the log says why (docs/slurm.md, the resume rule)
#   inconclusive (3/4)  -> nothing changes; logged (also when the prolog or another check holds
#                          the node: this check then loads nothing)
#
# Slurm does not act on a health check's exit status: this script always exits 0 and leaves the
# node's state to gpudiag. Settings as the prolog's (examples/slurm/prolog.sh), read from
# /etc/default/gpudiag-healthcheck (or $GPUDIAG_HEALTHCHECK_CONFIG): GPUDIAG, GPUDIAG_BUDGET
# (default 45: slurmd kills a health check that runs past 60 s, possibly between its drain and
# its log line), GPUDIAG_ARGS, GPUDIAG_HERE, GPUDIAG_LOG (default /var/log/gpudiag/healthcheck.log).
# slurmd gives a health check almost no environment (SLURMD_NODENAME, no SLURM_CONF): where
# slurm.conf is not in its default place, put "export SLURM_CONF=/path/slurm.conf" in that file.
set -u

PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
GPUDIAG=gpudiag
GPUDIAG_BUDGET=45
GPUDIAG_ARGS=""
GPUDIAG_HERE=--here
GPUDIAG_LOG=/var/log/gpudiag/healthcheck.log
GPUDIAG_SLACK=10
config=${GPUDIAG_HEALTHCHECK_CONFIG:-/etc/default/gpudiag-healthcheck}
# shellcheck source=/dev/null
[ -r "$config" ] && . "$config"
export PATH

node=${SLURMD_NODENAME:-$(hostname -s)}
mkdir -p "$(dirname "$GPUDIAG_LOG")" 2>/dev/null

log() {
    printf '%s node %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$node" "$*" >>"$GPUDIAG_LOG" 2>/dev/null
    command -v logger >/dev/null && logger -t gpudiag-healthcheck -- "node $node: $*"
}

# A job on the node (allocated, mixed, completing, or draining: a drained node a job still holds):
# no load beside it. The state is asked for alone (sinfo %T), never read out of scontrol's line,
# where a node's reason ("... State=IDLE ...") could imitate it. No answer: no check either.
state=$(timeout -k 1 5 sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -n 1)
case $state in
    "")
        log "skipped: Slurm did not say whether a job holds the node (sinfo gave no state)"
        exit 0 ;;
    allocated*|mixed*|completing*|draining*)
        log "skipped: a job holds the node ($state)"
        exit 0 ;;
esac

# Ended GPUDIAG_SLACK s past its budget should it hang, so the outcome is logged before slurmd kills
# this script at 60 s. gpudiag's stdout is kept apart until it ends, so that its last line, the
# summary, can be read: an exit 1 without it is Python's or gpudiag's own failure, not a FAIL.
output=$(mktemp -d "${TMPDIR:-/tmp}/gpudiag-healthcheck.XXXXXX") || {
    log "inconclusive: no temporary folder for the check's output: nothing changed"
    exit 0
}
trap 'rm -rf "$output"' EXIT
limit=$(( ${GPUDIAG_BUDGET%.*} + GPUDIAG_SLACK ))
# shellcheck disable=SC2086
timeout --kill-after=2 "$limit" $GPUDIAG preflight $GPUDIAG_HERE --hosts "$node" --budget "$GPUDIAG_BUDGET" \
    --drain --undrain -q $GPUDIAG_ARGS >"$output/stdout" 2>"$output/stderr" </dev/null
status=$?
cat "$output/stdout" "$output/stderr" >>"$GPUDIAG_LOG" 2>/dev/null
summary=$(tail -n 1 "$output/stdout")
case $status:$summary in
    0:*) log "healthy (gpudiag exit 0)" ;;
    "1:gpudiag preflight: FAIL $node, exit 1, "*) log "FAILED (gpudiag exit 1): $summary" ;;
    1:*) log "inconclusive (gpudiag exit 1 without its FAIL summary line: Python or gpudiag itself failed):" \
             "nothing changed" ;;
    *) log "inconclusive (gpudiag exit $status): nothing changed" ;;
esac
exit 0
