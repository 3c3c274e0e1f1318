#!/usr/bin/env bash
# Refreshes the stored Colab freezes from a checkout of github.com/googlecolab/backend-info:
#   tools/colab/refresh.sh PATH/TO/backend-info
# then update the date and commit in tools/colab/README.md and run the rehearsal
# (`make colab`): a new runtime may need the notebook's install cell or setup.cfg to move.
set -euo pipefail
src="${1:?usage: $0 PATH/TO/backend-info checkout}"
dst="$(dirname "$0")"
cp "$src/pip-freeze.txt" "$dst/pip-freeze.cpu.txt"
cp "$src/pip-freeze.gpu.txt" "$dst/pip-freeze.gpu.txt"
cp "$src/pip-freeze.tpu.txt" "$dst/pip-freeze.tpu.txt"
cp "$src/os-info.txt" "$src/os-info-tpu.txt" "$dst/"
if git -C "$src" rev-parse --short HEAD >/dev/null 2>&1; then
  echo "backend-info commit $(git -C "$src" rev-parse --short HEAD), $(git -C "$src" log -1 --format=%cs)"
fi
grep -hE '^(Python|jax|jaxlib|flax|numpy|protobuf|tensorflow|libtpu)[=a-z0-9. ]*' \
  "$dst"/os-info.txt "$dst"/pip-freeze.cpu.txt "$dst"/pip-freeze.gpu.txt "$dst"/pip-freeze.tpu.txt || true
