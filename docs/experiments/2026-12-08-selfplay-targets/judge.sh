#!/usr/bin/env bash
# The target table's positions and judge: the engine's own games at 1 s a move, every position scored by
# the engine at 10 s (one thread, no book), then bench/targets.py over them, and the match that shows the
# engine at 1 s far above the search that makes self-play's targets. Rerun to resume (bin/rescore resumes;
# a finished step is skipped).
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=runs/targets
mkdir -p $R
[ -e $R/games1s.hcpe ] || {
bin/match bin/usi_engine bin/usi_engine --byoyomi 1000 --games 8 --concurrency 2 --option1 Threads=1 \
    --option2 Threads=1 --random-plies 6 --seed 208 --csa $R/games1s --no-progress > $R/games1s.log 2>&1
bin/convert csa-to-hcpe $R/games1s -o $R/games1s.hcpe; }
bin/rescore --out $R/judge10s.hcpe --engine bin/usi_engine --option Threads=1 --option USI_OwnBook=false \
    --byoyomi 10000 --parallel 1 --timeout 60 --positions 500 --no-progress $R/games1s.hcpe
[ -e $R/table.txt ] || {
bench/targets.py $R/games1s.hcpe --judge $R/judge10s.hcpe --int8 --settings sharp,mctx,absolute,absolute-0.3 \
    --sims 32,64,128,400 --no-progress > $R/table.tmp && mv $R/table.tmp $R/table.txt; }
[ -e $R/match-judge.json ] || {
bin/match bin/usi_engine bin/usi_engine --name1 engine-1s --name2 gumbel-400 --option1 Threads=1 --option2 Threads=1 \
    --option1 USI_OwnBook=false --option2 USI_OwnBook=false --option2 Search_Mode=gumbel --byoyomi 1000 --nodes2 400 \
    --games 16 --random-plies 6 --seed 777 --max-moves 256 --no-progress --csa $R/match-judge > $R/match-judge.log 2>&1
tail -1 $R/match-judge.log > $R/match-judge.json; }
