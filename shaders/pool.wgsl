// max_pool2d_indices and max_pool2d (ember/ops/nn.py): for each window of a dense NCHW input,
// the flat index (into H*W) of its maximum, as PyTorch's return_indices, or the maximum itself
// (RESULT: best_at or best; OUT its type): the first maximum wins a tie, a NaN beats any number
// and the last NaN of a window wins (as PyTorch's CUDA and CPU kernels).
// Window rows r * sh - ph + i * dh outside the input are skipped. One invocation per output.
//
// info: [0] N*C [1] H [2] W [3] OH [4] OW [5] KH [6] KW [7] sh [8] sw [9] ph [10] pw
//       [11] dh [12] dw [13] x's offset.  T: f32 or i32.
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${OUT}>;
@group(1) @binding(1) var<storage, read> x: array<${T}>;

fn value_is_nan(v: ${T}) -> bool {
    return ${NAN};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    let H = info[1]; let W = info[2]; let OH = info[3]; let OW = info[4];
    if (i >= info[0] * OH * OW) {
        return;
    }
    let ow = i % OW;
    let oh = (i / OW) % OH;
    let nc = i / (OW * OH);
    let base = info[13] + nc * H * W;
    var best_at = -1;
    var best: ${T};
    var nan = false;
    for (var ki = 0; ki < info[5]; ki++) {
        let r = oh * info[7] - info[9] + ki * info[11];
        if (r < 0 || r >= H) {
            continue;
        }
        for (var kj = 0; kj < info[6]; kj++) {
            let q = ow * info[8] - info[10] + kj * info[12];
            if (q < 0 || q >= W) {
                continue;
            }
            let v = x[base + r * W + q];
            if (value_is_nan(v)) {
                best_at = r * W + q;
                best = v;
                nan = true;
            } else if (!nan && (best_at < 0 || v > best)) {
                best_at = r * W + q;
                best = v;
            }
        }
    }
    out[i] = ${RESULT};
}
