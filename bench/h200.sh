#!/bin/bash
# The GPU benchmarks on a machine with an NVIDIA GPU, its driver and no package registry
# (PLATFORM.md's H200 recipe): the Vulkan loader from .debs in .gl/, wgpu-py from wheels in
# .whl/, ember from this checkout's core/. Then each argument runs as one shell command, in
# its own process, one after the other, with what it printed sent on; a failing one does not
# stop the rest. Example (run from the repository root):
#   bash bench/h200.sh "python3 bench/fusion.py --gpu --only norms" "python3 bench/gpu_step.py"
set -u
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
T=$(mktemp -d)
pip install --quiet --no-index --no-deps --target "$T" .whl/*.whl
export PYTHONPATH="$T:$PWD/core"
# write `git rev-parse --short HEAD > .probe/HEAD` before the call: the device's copy of the
# working tree is current, but a .git there can be an older one (it named the session's first
# commit in every call of 2026-12-02)
echo "commit $(cat .probe/HEAD 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
# whether WebGPU offers this GPU's matrix instructions: wgpu-native's "cooperative-matrix" takes
# 8x8 f32 tiles only, on Vulkan where the driver lists that shape (its wgpu.h; issue 20)
python3 -c "import wgpu; a = wgpu.gpu.request_adapter_sync(power_preference='high-performance'); \
print(a.info['device'], '| cooperative-matrix:', 'cooperative-matrix' in a.features)" 2>&1 | tail -n 1
for cmd in "$@"; do
    echo "=== $cmd"
    start=$SECONDS
    bash -c "$cmd" 2>&1
    echo "=== rc $? in $((SECONDS - start)) s"
done
