#!/usr/bin/env bash
# One device call of the whole-stack training (docs/training_gpu.md, "One device call"), in three steps:
#
#   bash examples/gpu_call.sh prepare     # here: the pack, the wheels the GPU image lacks, a small working tree
#   OUT=... bash examples/gpu_call.sh device [MINUTES] [NETWORK ...]   # on the device machine, as one call
#   bash examples/gpu_call.sh restore     # here: the whole working tree back
#
# `device` installs the carried wheels, times a whole stack in the network (benchmarks/bench_stack_gpu.py), then
# trains each NETWORK (default: through_plane alone, end to end from the shipped `acdc_through_plane`, the design the
# CPU sessions chose; or slice_context, npc2d) for MINUTES (default 6.5, the whole call; give 3.25 each to two networks)
# from the shipped weights (`acdc`; for through_plane `acdc_through_plane`), or
# resumes it from training/checkpoints/NETWORK.pt when that was committed, and leaves 8 files in $OUT:
# bench.txt (the GPU, then the seconds per stack of acdc and of each trained state), bench_stack_gpu.json and per
# network NETWORK_best.pt (shipped-weights format), NETWORK_checkpoint.pt (to commit as
# training/checkpoints/NETWORK.pt and resume) and NETWORK_logs.tgz (train.log, train_log.jsonl, curve.png).
# slice_context's heads learn at CONTEXT_LR_SCALE (default 5) times the rate.
# DEVICE=cpu runs it here (a check; no bf16). TRAIN_ARGS adds trainer options to every run
# (e.g. TRAIN_ARGS='--augment {"invert_prob":0}').
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=${PACK:-.cache/acdc70_stacks.npz}
WHEELS=${WHEELS:-.whl}
# the paths the training does not read: the docs, the bundles and every weights file but acdc and acdc_through_plane
LEAVE_OUT=("!/docs/" "!/bundles/" "!/monai_npc/weights/camus.pt" "!/monai_npc/weights/sar.pt"
           "!/monai_npc/weights/brain2d.pt" "!/monai_npc/weights/priors/")

prepare() {
    if [[ -n "$(git status --porcelain)" ]]; then
        echo "gpu_call.sh prepare: commit or stash first (the sparse working tree would hide changes)" >&2; exit 1
    fi
    [[ -f "$PACK" ]] || OMP_NUM_THREADS=1 python examples/train_stacks_gpu.py pack --out "$PACK"
    mkdir -p "$WHEELS"
    python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 -d "$WHEELS" "monai==$(python -c 'import monai; print(monai.__version__)')"
    git sparse-checkout set --no-cone '/*' "${LEAVE_OUT[@]}"
    # what a call copies: the files git tracks or does not ignore (runs/, build outputs stay here)
    echo "working tree: $(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) bytes; carry: .cache .whl"
}

device() {
    : "${OUT:?OUT: the folder whose files come back}"
    local minutes=${1:-6.5}; shift || true
    local networks=(through_plane) device=${DEVICE:-cuda} bf16=()
    if [[ $# -gt 0 ]]; then networks=("$@"); fi
    if [[ "$device" == cuda ]]; then bf16=(--bf16); fi
    local deps=${DEPS:-/tmp/npc_deps}
    python -m pip install -q --no-index --no-deps --target "$deps" "$WHEELS"/*.whl
    export PYTHONPATH="$deps:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
      python benchmarks/bench_stack_gpu.py --pack "$PACK" --device "$device" --json "$OUT/bench_stack_gpu.json" 2>&1; } \
        | tee "$OUT/bench.txt"
    for net in "${networks[@]}"; do
        local run="runs/gpu_$net" start=(--init acdc) own=()
        # new heads beside pretrained 2-D weights learn at a multiple of the rate (docs/training_gpu.md)
        if [[ "$net" == slice_context ]]; then own=(--context-lr-scale "${CONTEXT_LR_SCALE:-5}"); fi
        # the CPU-trained head continues, now with its 2-D network (end to end)
        if [[ "$net" == through_plane ]]; then start=(--init acdc_through_plane); fi
        [[ -f "training/checkpoints/$net.pt" ]] && start=(--resume "training/checkpoints/$net.pt")
        rm -rf "$run"
        # shellcheck disable=SC2086  # TRAIN_ARGS: several options
        python examples/train_stacks_gpu.py train --pack "$PACK" --out "$run" --minutes "$minutes" "${bf16[@]}" \
            --device "$device" --network "$net" --label-weight 3 --lr 2e-4 --val-every 2 "${start[@]}" "${own[@]}" ${TRAIN_ARGS:-} \
            2>&1 | grep -v "non-tuple sequence" | tail -n 40 || true
        if [[ -f "$run/best.pt" ]]; then
            cp "$run/best.pt" "$OUT/${net}_best.pt"
            # the trained state as register runs it (the acdc weights' register settings), timed as the baseline was
            python examples/train_stacks_gpu.py export "$run/best.pt" "$run/export.pt" --meta-from acdc > /dev/null
            python benchmarks/bench_stack_gpu.py --pack "$PACK" --device "$device" --model "$run/export.pt" 2>&1 \
                | grep -v "non-tuple sequence" | tee -a "$OUT/bench.txt" || true
        fi
        [[ -f "$run/checkpoint.pt" ]] && cp "$run/checkpoint.pt" "$OUT/${net}_checkpoint.pt"
        local logs
        logs=$(cd "$run" 2>/dev/null && ls train.log train_log.jsonl curve.png 2>/dev/null || true)
        if [[ -n "$logs" ]]; then tar czf "$OUT/${net}_logs.tgz" -C "$run" $logs; fi
    done
}

restore() {
    git sparse-checkout disable
}

case "${1:-}" in
    prepare) prepare ;;
    device) shift; device "$@" ;;
    restore) restore ;;
    *) echo "usage: bash examples/gpu_call.sh prepare | device [MINUTES] [NETWORK ...] | restore" >&2; exit 2 ;;
esac
