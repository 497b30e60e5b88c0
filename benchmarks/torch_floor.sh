#!/usr/bin/env bash
# Every drop and notebook top to bottom (nbval) on another torch, to check pyproject.toml's floor:
#
#     benchmarks/torch_floor.sh 2.10.0 [venv folder]
#
# Builds a scratch virtual environment with that torch from PyPI (the CUDA build: several GB;
# it runs on CPU) and the course's other pinned packages, then runs source/ and notebooks/
# as `make test` does. Measured on 2026-11-25: 2.10.0 and 2.11.0 pass all 231 cells;
# 2.9.1 fails 4 (PyTorch's pipeline schedules, replicate_with_fsdp), 2.4.1 fails 7.
set -euo pipefail
version=${1:?usage: benchmarks/torch_floor.sh <torch version> [venv folder]}
venv=${2:-/tmp/threeaxes-torch-$version}
root=$(cd "$(dirname "$0")/.." && pwd)
python3 -m venv "$venv"
"$venv/bin/pip" install -q "torch==$version"
grep -v '^torch==' "$root/requirements.txt" > "$venv/requirements.txt"
grep -v -e '^torch==' -e '^nvidia' -e '^triton' "$root/constraints.txt" > "$venv/constraints.txt"
"$venv/bin/pip" install -q -r "$venv/requirements.txt" -c "$venv/constraints.txt"
"$venv/bin/pip" install -q --no-deps -e "$root"
cd "$root"
PYTHONPATH="$root" "$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
    --nbval-lax --nbval-kernel-startup-timeout=180 source notebooks
