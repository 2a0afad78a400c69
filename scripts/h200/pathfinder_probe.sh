#!/usr/bin/env bash
# Device call (issues #7, #8): what makes the paper model leave chance on Pathfinder-32 within
# minutes. transfer_mini.sh (session 4) pretrained Pathfinder-32 for 18.7K steps of 256 at lr 1e-4
# and at 5e-4: both stayed at chance (best val 52 %), while the same model memorises 256 images on a
# CPU in 150 steps (gradients flow) — so either the hard images need far more updates than a call
# gives, or something about the setting is off. Four runs of the `paper` model, two per GPU, each
# capped at PROBE_MIN minutes; every run keeps its Lightning metrics.csv (train loss and accuracy):
#   GPU 0: P1 easy images (contour length 6), the paper setting (batch 256, lr 1e-4)
#          P2 hard images, batch 64, lr 1e-4 (4x the updates per image seen)
#   GPU 1: P3 hard images, batch 256, lr 1e-3
#          P4 hard images, batch 64, lr 5e-4
# On a one-GPU machine all four share GPU 0.
# SET=full instead: the LRA-size training split (N=200000 -> 160,000 images), batch 256, lr 1e-4 and 1e-3.
# SET=controls (session 6; every earlier probe memorised, while a small CNN generalises on the easy
# images: results/pathfinder/cnn/): eight runs on easy images, four per GPU, each changing one thing
# of the paper setting (E1) — the attention back-end (E2 sdpa: is our kernel to blame?), sinusoidal
# positions (E3), a CLS token (E4), the LRA repository's own Transformer config (E5:
# lra_benchmarks/image/configs/pathfinder32 — 1 layer, dim 128, 4 heads x 16, MLP 128, dropout 0.2,
# fixed sinusoidal positions, lr 1e-3, cosine decay), no dropout (E6), the Nystromformer code's exact
# optimiser (E7: OneCycleLR, no gradient clipping), weight decay 0.1 (E8).
# SET=augment (session 6, after every control memorised too): does denying memorisation help? Two
# runs of the paper setting on 200,000 easy training images (N=250000), one GPU: G1 with the
# dihedral augmentation (data.augment=dihedral: every image in its 8 rotations / mirrors), G2 without.
# SET=embed (session 7; every token-embedding probe memorised or fitted nothing): how pixels and
# positions enter the model, eight runs on easy images (N=100000: 80,000 training images), four per
# GPU. model.pixel_embedding=linear (the intensity times a learned vector: no rare-intensity tokens to
# memorise an image by) and model.positional=axial (learned row + column vectors: 2-D neighbourhood
# from the start, instead of 1,024 free vectors), alone and together, without dropout, with the
# dihedral augmentation, at lr 1e-3, and in a 4-layer dim-128 model:
#   GPU 0: H1 linear, H2 linear without dropout, H3 axial, H4 axial + linear
#   GPU 1: H5 linear + dihedral, H6 axial + linear + dihedral, H7 wide (dim 128, 4 layers, 4 heads
#          x 32, MLP 256, lr 2e-4) axial + linear, H8 axial + linear at lr 1e-3
# Usage (device): OUT=$OUT LRA_GIT_REV=<rev> [SET=probes|full|controls|augment|embed] [N=...] [PROBE_MIN=6.5] bash scripts/h200/pathfinder_probe.sh
# CPU check of the commands (tiny data, a few steps, sdpa): DRY=1 OUT=/tmp/o KEEP=/tmp/k bash scripts/h200/pathfinder_probe.sh
RECIPE=pathfinder_probe
source "$(dirname "$0")/lib.sh"
SET=${SET:-probes}         # probes | full (see the lanes below)
PROBE_MIN=${PROBE_MIN:-6.5}
N=${N:-80000}              # 64,000 / 8,000 / 8,000 per difficulty (use 50000 on a 16-core one-GPU machine)
EVAL=${EVAL:-2000}
ATTN=flash
EXTRA=()
if (( ${DRY:-0} )); then
  N=200; EVAL=16; ATTN=sdpa; PROBE_MIN=0.3; EXTRA=(model.dim=16 model.mlp_dim=16 model.head_dim=8)
fi
TRAIN=$(( N * 8 / 10 ))

say "data: Pathfinder-32, $N images per difficulty ($SET)"
CORES=$(nproc)
if [[ "$SET" == full ]]; then
  lra data generate pathfinder32 --n "$N" --out "$DATA" --workers "$CORES" > "$WORK/data_hard.log" 2>&1
elif [[ "$SET" == controls || "$SET" == augment || "$SET" == embed ]]; then
  lra data generate pathfinder32 --n "$N" --difficulty easy --out "$DATA" --workers "$CORES" \
      > "$WORK/data_easy.log" 2>&1
else
  lra data generate pathfinder32 --n "$N" --out "$DATA" --workers $(( CORES / 2 )) > "$WORK/data_hard.log" 2>&1 &
  lra data generate pathfinder32 --n "$N" --difficulty easy --out "$DATA" --workers $(( CORES / 2 - 1 )) \
      > "$WORK/data_easy.log" 2>&1 &
  wait
fi

# probe NAME BATCH LR [KEY=VALUE ...]: the paper preset, the LR schedule of the paper's 62,400 steps of
# 256 rescaled to the batch (same images per warm-up, decay and evaluation), capped at PROBE_MIN
probe() {
  local name=$1 batch=$2 lr=$3; shift 3
  local scale=$(( 256 / batch ))
  say "$name: batch $batch, lr $lr $*"
  timeout -k 5 "$(left 5)" python3 -m lra train --task pathfinder32 --attention "$ATTN" --preset paper \
      --runs-dir "$RUNS/$name" --data-dir "$DATA" --no-progress \
      "train.batch_size=$batch" "optim.lr=$lr" "train.max_steps=$(( 62400 * scale ))" \
      "optim.warmup_steps=$(( 312 * scale ))" "train.val_check_interval=$(( 125 * scale ))" \
      "train.max_minutes=$PROBE_MIN" "data.limit_train=$TRAIN" "data.limit_eval=$EVAL" "${EXTRA[@]}" "$@" \
      > "$WORK/$name.log" 2>&1
  say "$name done: $(grep -h 'best val' "$WORK/$name.log" | tail -1)"
}

if [[ "$SET" == full ]]; then
  # SET=full (after the four probes all memorised their 40,000 training images — train accuracy up to
  # 81 % at chance validation): the full 160,000-image training split of the LRA data, N=200000
  lane0() { probe F1_hard_full_b256_lr1e-4 256 1e-4; }
  lane1() { probe F2_hard_full_b256_lr1e-3 256 1e-3; }
elif [[ "$SET" == controls ]]; then
  E=(data.difficulty=easy)
  LRA_REPO=(model.depth=1 model.dim=128 model.num_heads=4 model.head_dim=16 model.mlp_dim=128
            model.dropout=0.2 model.positional=sinusoidal optim.schedule=cosine)
  lane0() {
    probe E1_easy_paper 256 1e-4 "${E[@]}" &
    ATTN=sdpa probe E2_easy_sdpa 256 1e-4 "${E[@]}" &
    probe E3_easy_sinusoidal 256 1e-4 "${E[@]}" model.positional=sinusoidal &
    probe E4_easy_cls 256 1e-4 "${E[@]}" model.pooling=cls &
    wait
  }
  lane1() {
    probe E5_easy_lra_repo 256 1e-3 "${E[@]}" "${LRA_REPO[@]}" &
    probe E6_easy_no_dropout 256 1e-4 "${E[@]}" model.dropout=0 model.attention_dropout=0 &
    probe E7_easy_onecycle_noclip 256 1e-4 "${E[@]}" optim.schedule=onecycle optim.grad_clip=0 &
    probe E8_easy_wd0.1 256 1e-4 "${E[@]}" optim.weight_decay=0.1 &
    wait
  }
elif [[ "$SET" == augment ]]; then
  lane0() { probe G1_easy_dihedral 256 1e-4 data.difficulty=easy data.augment=dihedral; }
  lane1() { probe G2_easy_plain 256 1e-4 data.difficulty=easy; }
elif [[ "$SET" == embed ]]; then
  E=(data.difficulty=easy)
  LIN=(model.pixel_embedding=linear)
  AX=(model.positional=axial)
  WIDE=(model.dim=128 model.depth=4 model.num_heads=4 model.head_dim=32 model.mlp_dim=256)
  lane0() {
    probe H1_easy_linear 256 1e-4 "${E[@]}" "${LIN[@]}" &
    probe H2_easy_linear_no_dropout 256 1e-4 "${E[@]}" "${LIN[@]}" model.dropout=0 model.attention_dropout=0 &
    probe H3_easy_axial 256 1e-4 "${E[@]}" "${AX[@]}" &
    probe H4_easy_axial_linear 256 1e-4 "${E[@]}" "${AX[@]}" "${LIN[@]}" &
    wait
  }
  lane1() {
    probe H5_easy_linear_dihedral 256 1e-4 "${E[@]}" "${LIN[@]}" data.augment=dihedral &
    probe H6_easy_axial_linear_dihedral 256 1e-4 "${E[@]}" "${AX[@]}" "${LIN[@]}" data.augment=dihedral &
    probe H7_easy_wide_axial_linear 256 2e-4 "${E[@]}" "${AX[@]}" "${LIN[@]}" "${WIDE[@]}" &
    probe H8_easy_axial_linear_lr1e-3 256 1e-3 "${E[@]}" "${AX[@]}" "${LIN[@]}" &
    wait
  }
else
  lane0() { probe P1_easy_b256_lr1e-4 256 1e-4 data.difficulty=easy & probe P2_hard_b64_lr1e-4 64 1e-4 & wait; }
  lane1() { probe P3_hard_b256_lr1e-3 256 1e-3 & probe P4_hard_b64_lr5e-4 64 5e-4 & wait; }
fi
if (( NGPU >= 2 )); then
  run_lanes lane0 lane1
else  # one GPU: all four side by side on it (sequential lanes would not fit the call)
  (export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}; lane0 > "$WORK/lane0.log" 2>&1 & lane1 > "$WORK/lane1.log" 2>&1 & wait)
fi

for d in "$RUNS"/*/; do   # each probe's metrics (train loss/acc per logging step, val per evaluation)
  f=$(find "$d" -name metrics.csv | head -1); [[ -n "$f" ]] && cp "$f" "$WORK/metrics_$(basename "$d").csv"
done
collect_results
pack
