#!/usr/bin/env bash
# The training step alone: stage 9 fine-tuned once on 200 self-play games per target setting, and a
# control of the same steps on fresh teacher data; held-out losses and paired games at 200 playouts.
# Rerun to resume: a step whose output exists is skipped.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=runs/targets
D=../shared/data/distill-miniosl
TEST="models/heldout/miniosl-seed2 models/heldout/fsf-200k.hcpe"
TRAIN="--init models/default.pt --epochs 1 --batch-size 256 --lr 0.001 --val-lambda 0.8 --mirror 0.5 --hcpe3-average --device cpu --workers 0 --no-progress"
selfplay() {  # arm, flags...
    local arm=$1; shift
    [ -e $R/sp-$arm/.done ] && return
    rm -rf $R/sp-$arm
    bin/selfplay --out $R/sp-$arm --games 200 --parallel 50 --sims 32 --int8 --random-plies 8 --max-moves 256 --seed 11 --no-progress "$@" > $R/sp-$arm.log 2>&1
    touch $R/sp-$arm/.done
}
train() {  # arm, data...
    local arm=$1; shift
    [ -e $R/tr-$arm/model.pt ] && return
    bin/train --data "$@" --out $R/tr-$arm $TRAIN > $R/tr-$arm.log 2>&1
}
match() {  # arm
    local arm=$1
    [ -e $R/match-$arm.json ] && return
    bin/match bin/usi_engine bin/usi_engine --option1 DNN_Model=$R/tr-$arm/model.pt --name1 $arm --name2 stage9 \
        --option1 Threads=1 --option2 Threads=1 --option1 USI_OwnBook=false --option2 USI_OwnBook=false \
        --nodes 200 --games ${GAMES:-120} --random-plies 6 --seed 4242 --sprt 0 35 --max-moves 256 \
        --concurrency ${CONC:-1} --no-progress --csa $R/match-$arm > $R/match-$arm.log 2>&1
    tail -1 $R/match-$arm.log > $R/match-$arm.json.tmp && mv $R/match-$arm.json.tmp $R/match-$arm.json
}
selfplay mctx --c-scale 0.1 --value-target policy
train mctx $R/sp-mctx
selfplay absolute --c-scale 1 --q-transform absolute --value-target policy
train absolute $R/sp-absolute
# control: as many positions (so as many steps) of teacher games stage 9 never saw (it trained on chunks 0-104)
if [ ! -e $R/tr-control/model.pt ]; then
    .venv/bin/python - <<PY
from pathlib import Path
from engine.records.hcpe3_games import _games_with_offsets
from train.loop.steps import count_targets
need = sum(count_targets(f) for f in Path("$R/sp-mctx").glob("*.hcpe3"))
out, have = bytearray(), 0
for i in range(130, 145):
    src = Path("$D") / f"chunk-{i:05d}.hcpe3"
    data = src.read_bytes()
    for start, end, game in _games_with_offsets(src):
        if have >= need:
            break
        out += data[start:end]
        have += sum(len(c) > 0 for c in game.candidates)
Path("$R/control.hcpe3").write_bytes(bytes(out))
print("control positions", have, "self-play positions", need)
PY
    bin/train --data $R/control.hcpe3 --out $R/tr-control $TRAIN > $R/tr-control.log 2>&1
fi
[ -e $R/heldout.jsonl ] || .venv/bin/python bin/train --evaluate models/default.pt $R/tr-mctx/model.pt \
    $R/tr-absolute/model.pt $R/tr-control/model.pt --test $TEST --out $R/eval-tmp > $R/heldout.jsonl 2> $R/heldout.log
match mctx
match control
match absolute
# the relabelling arm: the mctx arm's own self-play positions with miniosl's policy and value
if [ ! -e $R/tr-relabel/model.pt ]; then
    [ -e $R/relabel.done ] || { rm -f $R/relabel.hcpe3; bin/distill $R/relabel.hcpe3 --relabel $R/sp-mctx --teacher miniosl --threads 1 --no-progress > $R/relabel.log 2>&1 && touch $R/relabel.done; }
    train relabel $R/relabel.hcpe3
fi
[ -e $R/heldout-relabel.jsonl ] || .venv/bin/python bin/train --evaluate $R/tr-relabel/model.pt --test $TEST \
    --out $R/eval-tmp > $R/heldout-relabel.jsonl 2>> $R/heldout.log
# more paired games for the arms whose first 120 were closest to stage 9
for arm in mctx control; do
    [ -e $R/match2-$arm.json ] && continue
    bin/match bin/usi_engine bin/usi_engine --option1 DNN_Model=$R/tr-$arm/model.pt --name1 $arm --name2 stage9 \
        --option1 Threads=1 --option2 Threads=1 --option1 USI_OwnBook=false --option2 USI_OwnBook=false \
        --nodes 200 --games 120 --random-plies 6 --seed 4243 --max-moves 256 --no-progress --csa $R/match2-$arm > $R/match2-$arm.log 2>&1
    tail -1 $R/match2-$arm.log > $R/match2-$arm.json
done
match relabel
