#!/usr/bin/env bash
# The GPU check, in under 8 minutes on one H100/H200: FP16 vs FP32 agreement, network rows/s (FP32 the
# baseline), AMP training steps/s, self-play positions/s and the USI engine's nodes/s, each section under
# its own time limit (bench/gpu_check.py does the work). Writes one JSON file ($OUT/gpu_check.json when OUT
# is set, else runs/gpu_check.json) and ends with one summary line. Where there is no GPU it says so in one
# line and exits 0.
#   bash bench/gpu_check.sh                        # flags go to bench/gpu_check.py: --sections, --budget,
#   bash bench/gpu_check.sh --sections agreement   #   --timeout NAME=SECONDS, --out, --cpu-smoke
#
# The host has Python 3.12 with CUDA torch, onnx and onnxruntime, no internet, and may lack cshogi, numba
# (with llvmlite), tqdm and filelock. Bring them as cp312 wheels in build/gpu-wheels (git ignores build/, so
# name build/gpu-wheels among the paths that travel with the tree). On a machine with internet:
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 --no-deps -d build/gpu-wheels \
#     cshogi==1.1.0 numba==0.68.1 llvmlite==0.50.0 tqdm==4.70.1 filelock==4.3.2
# That gets cshogi 1.1.0 (7.6 MB), numba 0.68.1 (3.9 MB), llvmlite 0.50.0 (59.7 MB), tqdm 4.70.1 and
# filelock 4.3.2: 71 MB. numba 0.68.1 takes numpy 1.22 to 2.5, and cshogi 1.1.0 is built against numpy 2's
# headers, so both run on numpy 1.26 and 2.x (tried on Python 3.12 with numpy 1.26.4 and 2.5.5; cshogi's
# metadata pins numpy<1.27 for Python 3.12, which --no-deps ignores). Where 71 MB is more than may travel
# (64 MiB with the tree), leave out what the host has (a torch image often has numba and llvmlite), or
# recompress the wheels' members with LZMA (the same files; pip installs them as any wheel), 71 -> 50 MB in
# a few minutes:
#   bash bench/gpu_check.sh --repack-wheels build/gpu-wheels
# Only the packages whose import fails are installed, and the output says which:
#   python -m pip install --no-index --no-deps --upgrade --target build/gpu-site --find-links build/gpu-wheels ...
# build/gpu-site is put first on PYTHONPATH; the host's own environment is left as it was.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=$((SECONDS + 470))  # seconds for the whole check, installs included
wheels=build/gpu-wheels
site=build/gpu-site
if [ -n "${GUMBEL_SHOGI_PYTHON:-}" ]; then
    py=$GUMBEL_SHOGI_PYTHON
elif [ -x .venv/bin/python ]; then
    py=.venv/bin/python
else
    py=python3
fi

if [ "${1:-}" = --repack-wheels ]; then
    [ -n "${2:-}" ] || { echo "gpu_check: error: --repack-wheels needs the wheels' folder" >&2; exit 2; }
    exec "$py" - "$2" <<'PY'
import io, sys, zipfile
from pathlib import Path

sys.path.insert(0, ".")
from tqdm import tqdm
from engine.fileio import atomic_write_bytes

folder = Path(sys.argv[1])
wheels = sorted(folder.glob("*.whl"))
if not wheels:
    sys.exit(f"gpu_check: error: --repack-wheels {folder}: no .whl files there")
for wheel in wheels:
    with zipfile.ZipFile(wheel) as zin:
        infos = zin.infolist()
        if all(i.compress_type == zipfile.ZIP_LZMA for i in infos):
            print(f"{wheel.name}: already LZMA")
            continue
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_LZMA) as zout, tqdm(
            total=sum(i.file_size for i in infos), unit="B", unit_scale=True, desc=wheel.name[:32]
        ) as bar:
            for info in infos:
                zout.writestr(info, zin.read(info), compress_type=zipfile.ZIP_LZMA)
                bar.update(info.file_size)
    before = wheel.stat().st_size
    if buf.tell() < before:
        atomic_write_bytes(wheel, buf.getvalue())
    print(f"{wheel.name}: {before / 1e6:.1f} MB -> {wheel.stat().st_size / 1e6:.1f} MB")
PY
fi

smoke=0
for arg in "$@"; do [ "$arg" = --cpu-smoke ] && smoke=1; done
if [ "$smoke" = 0 ]; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
    if [ -z "$gpu" ]; then
        echo "gpu_check: no GPU on this machine (nvidia-smi finds none): nothing to measure"
        exit 0
    fi
fi

[ -d "$site" ] && export PYTHONPATH="$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"
missing() {  # the wheels to install for the modules that fail to import (why, on stderr)
    "$py" - <<'PY'
import importlib, sys

wanted = {"cshogi": "cshogi", "numba": "numba llvmlite", "tqdm": "tqdm", "filelock": "filelock"}
names = []
for module, wheels in wanted.items():
    try:
        importlib.import_module(module)
    except Exception as e:
        print(f"gpu_check: cannot import {module}: {type(e).__name__}: {str(e).strip().splitlines()[0]}",
              file=sys.stderr)
        names.append(wheels)
print(" ".join(names))
PY
}
need=$(missing)
if [ -n "$need" ] && ls "$wheels"/*.whl >/dev/null 2>&1; then
    echo "gpu_check: installing $need from $wheels into $site (pip --no-index --no-deps)"
    # shellcheck disable=SC2086  # one word per package
    "$py" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" \
        --find-links "$wheels" $need || echo "gpu_check: pip did not install all of: $need"
    case ":${PYTHONPATH:-}:" in *":$PWD/$site:"*) ;; *) export PYTHONPATH="$PWD/$site${PYTHONPATH:+:$PYTHONPATH}" ;; esac
    export GPU_CHECK_INSTALLED="$need"
    need=$(missing)
fi
if [ -n "$need" ]; then
    echo "gpu_check: $need cannot be imported and $wheels has no wheels for them (this script's header says how to bring them)"
    case " $need " in *" tqdm "*) exit 1 ;; esac  # gpu_check.py itself needs tqdm; the sections needing the others fail
fi
# the sections' budget is what is left less a margin (a --budget given here comes later and wins)
exec timeout -k 10 $((limit - SECONDS)) "$py" bench/gpu_check.py --budget $((limit - SECONDS - 20)) "$@"
