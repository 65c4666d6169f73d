#!/usr/bin/env bash
# The USI engine's Gumbel mode at c_scale 0.1 against 1.0 (200 simulations a move, paired openings).
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=runs/targets

[ -e $R/match-gumbel-mode.json ] || {
bin/match bin/usi_engine bin/usi_engine --name1 gumbel-c0.1 --name2 gumbel-c1 --option1 Threads=1 --option2 Threads=1 \
    --option1 USI_OwnBook=false --option2 USI_OwnBook=false --option1 Search_Mode=gumbel --option2 Search_Mode=gumbel \
    --option1 Gumbel_C_Scale=10 --option2 Gumbel_C_Scale=100 --nodes 200 \
    --games 200 --sprt -35 0 --random-plies 6 --seed 5151 --max-moves 256 --no-progress --csa $R/match-gumbel-mode > $R/match-gumbel-mode.log 2>&1
tail -1 $R/match-gumbel-mode.log > $R/match-gumbel-mode.json; }
