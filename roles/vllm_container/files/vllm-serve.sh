#!/usr/bin/env bash
# dgxspark.cluster vllm_container: the main process of a vLLM container (entrypoint): the head's with Ray, every node's
# with vLLM's own multi-node backend (DGXSPARK_EXECUTOR=mp).
#   vllm-serve.sh serve MODEL --distributed-executor-backend ray|mp ...   (the vllm command line, no secret in it)
# 1. writes $VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json from DGXSPARK_RAY_NON_CARRY_OVER: the names vLLM's Ray
#    executor must not copy from this driver to the workers (per-host values, secrets);
# 2. with Ray, waits until the Ray cluster can place the engine's GPUs at once (dgxspark_ray_ready.py: the same ready nodes at
#    two polls, none draining or listed twice; for up to DGXSPARK_SETTLE_S, 60 s, none listed alive without answering):
#    a placement group made while a worker restarts can wait forever (seen in the lab with Ray 2.60);
# 3. on the head, opens the API key's mounted file (mode 0000: only CAP_DAC_READ_SEARCH opens it) as fd 3 for the API
#    guard (the key is never in argv, an environment, `docker inspect` or the log); vLLM and every other child start
#    without CAP_DAC_READ_SEARCH and CAP_SETPCAP, so that neither remote code in vLLM nor a process of the Ray container
#    (same PID namespace, through /proc/PID/root) opens the file;
# 4. puts the API guard on PYTHONPATH (vLLM imports it for --middleware) and becomes vllm; on the head through the guard's
#    main (python3 dgxspark_api_guard.py VLLM ...), which makes itself non-dumpable, reads fd 3 and closes it before vLLM
#    forks its engine core (a child forked with fd 3 open would hold it for good), then drops the two capabilities; a
#    headless rank of mp becomes dgxspark_rank_watch.py with vllm as its child (DGXSPARK_RANK_WATCH: rank 0's rendezvous,
#    HOST:PORT).
# Non-dumpable: /proc/PID/root of a process of this container would open its files (the TLS key) to root in the Ray
# container, which shares the head's PID namespace, and ptrace would open its memory.
# Before all this it exports the cluster's hash seed (PYTHONHASHSEED, from its mounted file) and checks and applies the
# model profile's patches, when it has any. Docker's restart policy starts it again when it exits.
set -u
# Every Python of this container is non-dumpable from its exec on, not only from its first prctl milliseconds later (in
# which root in the Ray container could attach with ptrace and stay): the kernel makes a process that executes a file it
# cannot read non-dumpable, and no process here reads past a file's mode once it runs without the start script's
# capabilities. The container's own copies of the interpreter and of bash (the patches' shell) lose their read bits;
# executing them needs none.
for program in python3 bash; do
    file=$(readlink -f "$(command -v "$program")")
    if ! chmod a-r "$file"; then
        echo "vllm-serve.sh: warning: $file cannot be made unreadable; its processes are non-dumpable only once started" >&2
    fi
done
# The head's script holds the two capabilities that open the key (see 3.); what it starts drops both once non-dumpable,
# never dumpable and capless at once: the Ray wait and the guard's main themselves (dgxspark_api_guard.py), the patches
# through the guard's --exec. Elsewhere neither is held.
hidden=()
if [ -n "${DGXSPARK_API_KEY_FILE:-}" ]; then
    hidden=(python3 "${DGXSPARK_PYTHON_DIR:?DGXSPARK_PYTHON_DIR is not set}/dgxspark_api_guard.py" --exec)
fi
# The cluster's Python hash seed, from its mounted 0600 file: the same on every rank and after every restart.
if [ -n "${DGXSPARK_HASH_SEED_FILE:-}" ]; then
    seed=$(cat "$DGXSPARK_HASH_SEED_FILE" 2>/dev/null) || seed=""
    case $seed in
        '' | *[!0-9]*) echo "vllm-serve.sh: the hash seed file $DGXSPARK_HASH_SEED_FILE is missing or not a number" >&2; exit 1 ;;
    esac
    export PYTHONHASHSEED=$seed
fi
# The model profile's patches (checked, then applied to this container's vLLM), mounted by ray_cluster.
if [ -n "${DGXSPARK_PATCHES:-}" ]; then
    "${hidden[@]}" bash "${DGXSPARK_PATCH_DIR:?}/dgxspark-apply-patches.sh" || exit 1
fi
mkdir -p "${VLLM_CONFIG_ROOT:?VLLM_CONFIG_ROOT is not set}"
printf '%s\n' "${DGXSPARK_RAY_NON_CARRY_OVER:-[]}" > "$VLLM_CONFIG_ROOT/ray_non_carry_over_env_vars.json"

# The engine's placement group only once the cluster can take it at once (dgxspark_ray_ready.py says why it waits).
if [ "${DGXSPARK_EXECUTOR:-ray}" = ray ]; then
    need=${DGXSPARK_VLLM_GPUS:?DGXSPARK_VLLM_GPUS (GPUs the engine needs) is not set}
    python3 "${DGXSPARK_PYTHON_DIR:?DGXSPARK_PYTHON_DIR is not set}/dgxspark_ray_ready.py" "$need" "${DGXSPARK_SETTLE_S:-60}" || exit 1
fi

# The API guard (--middleware dgxspark_api_guard.KeyOnEveryRoute) reads the key from its file itself: the key is in no
# process's environment (where /proc/PID/environ shows it to the host's PID namespace), and vLLM's own check is not used.
if [ -n "${DGXSPARK_API_KEY_FILE:-}" ]; then
    if [ ! -s "$DGXSPARK_API_KEY_FILE" ] || ! exec 3<"$DGXSPARK_API_KEY_FILE"; then
        echo "vllm-serve.sh: the API key file $DGXSPARK_API_KEY_FILE is missing, empty or cannot be opened" >&2
        exit 1
    fi
    # Opened as late as possible: the guard's main reads fd 3 and closes it before vLLM starts (see 4.).
    export DGXSPARK_API_KEY_FD=3
    vllm_script=$(command -v vllm) || { echo "vllm-serve.sh: no vllm on PATH" >&2; exit 1; }
    # The guard's main drops both capabilities itself, once non-dumpable (see above).
    vllm=(python3 "$DGXSPARK_PYTHON_DIR/dgxspark_api_guard.py" "$vllm_script")
else
    vllm=(vllm)
fi
export PYTHONPATH="$DGXSPARK_PYTHON_DIR${PYTHONPATH:+:$PYTHONPATH}"
# A headless rank (mp) under its watch: it ends when rank 0's rendezvous is gone (vLLM #32136), and Docker starts it again.
if [ -n "${DGXSPARK_RANK_WATCH:-}" ]; then
    exec "${hidden[@]}" python3 "$DGXSPARK_PYTHON_DIR/dgxspark_rank_watch.py" "${DGXSPARK_RANK_WATCH%:*}" "${DGXSPARK_RANK_WATCH##*:}" -- vllm "$@"
fi
exec "${vllm[@]}" "$@"
