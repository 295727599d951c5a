#!/bin/sh
# Installs torch==$1 into the active environment.
#
# TORCH_INDEX_URL set (the engine-cpu default is PyTorch's CPU wheel index): torch and its dependencies from there.
# TORCH_INDEX_URL empty: the default index's Linux wheel, which is the CUDA build. libtorch links against the CUDA
# libraries, so `import torch` fails without them even on a CPU; they stay. triton is left out: only
# torch.compile uses it, and the engine does not.
set -eu
version=$1
here=$(dirname "$0")
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  pip install --index-url "$TORCH_INDEX_URL" "torch==$version"
else
  pip install packaging
  pip install --no-deps "torch==$version"
  python "$here/requirements.py" --dist torch --without triton | pip install -r /dev/stdin
fi
python -c 'import torch; assert (torch.ones(2) + 1).sum().item() == 4; print("torch", torch.__version__)'
