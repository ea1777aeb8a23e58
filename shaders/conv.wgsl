// Direct 2-D convolutions over dense NCHW tensors, the three primitives of ember/ops/nn.py
// (conv_gemm.wgsl computes them as implicit GEMMs; ember.autotune picks between the two):
//   conv2d            out [N, O, OH, OW] = x [N, C, H, W] (*) w [O, C/G, KH, KW]
//   conv_transpose2d  out [N, O, OH, OW] = the adjoint of conv2d in x: x [N, C, H, W],
//                     w [C, O/G, KH, KW]
//   conv2d_weight     out [O, C/G, KH, KW] = conv2d's weight gradient from x [N, C, H, W] and
//                     the output gradient g [N, O, OH, OW]
// Windows follow PyTorch: the input row of output row r and kernel row i is
// r * sh - top + i * dh (top < 0 crops); reads outside the input are zeros. One invocation per
// output element for the first two; one workgroup per weight element for conv2d_weight, whose
// sums run over N*OH*OW.
//
// info: [0] N [1] C [2] H [3] W [4] O [5] OH [6] OW [7] KH [8] KW [9] sh [10] sw [11] top
//       [12] left [13] dh [14] dw [15] groups [16] x's offset [17] the second input's offset
//       [18] the bias's offset (conv2d with a bias: BIAS_DECL declares it, ACC adds it)
// (for conv_transpose2d, H, W are x's and OH, OW the result's; for conv2d_weight, OH, OW are
// g's.) T: f32.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${T}>;
@group(1) @binding(1) var<storage, read> x: array<${T}>;
@group(1) @binding(2) var<storage, read> y: array<${T}>;
${BIAS_DECL}

@compute @workgroup_size(256)
fn conv2d(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    let N = info[0]; let C = info[1]; let H = info[2]; let W = info[3]; let O = info[4];
    let OH = info[5]; let OW = info[6]; let KH = info[7]; let KW = info[8];
    if (i >= N * O * OH * OW) {
        return;
    }
    let ow = i % OW;
    let oh = (i / OW) % OH;
    let o = (i / (OW * OH)) % O;
    let n = i / (OW * OH * O);
    let G = info[15];
    let cg = C / G;
    let c0 = (o / (O / G)) * cg;
    let r0 = oh * info[9] - info[11];
    let q0 = ow * info[10] - info[12];
    var acc: ${T} = 0.0;
    for (var c = 0; c < cg; c++) {
        let xb = info[16] + (n * C + c0 + c) * H * W;
        let wb = info[17] + (o * cg + c) * KH * KW;
        for (var ki = 0; ki < KH; ki++) {
            let r = r0 + ki * info[13];
            if (r < 0 || r >= H) {
                continue;
            }
            for (var kj = 0; kj < KW; kj++) {
                let q = q0 + kj * info[14];
                if (q >= 0 && q < W) {
                    acc += x[xb + r * W + q] * y[wb + ki * KW + kj];
                }
            }
        }
    }
    out[i] = ${ACC};
}

@compute @workgroup_size(256)
fn conv_transpose2d(@builtin(global_invocation_id) gid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    let N = info[0]; let C = info[1]; let H = info[2]; let W = info[3]; let O = info[4];
    let OH = info[5]; let OW = info[6]; let KH = info[7]; let KW = info[8];
    let sh = info[9]; let sw = info[10];
    if (i >= N * O * OH * OW) {
        return;
    }
    let ow = i % OW;
    let oh = (i / OW) % OH;
    let o = (i / (OW * OH)) % O;
    let n = i / (OW * OH * O);
    let G = info[15];
    let og = O / G;
    let cg = C / G;
    let c0 = (o / og) * cg;
    let ol = o % og;
    var acc: ${T} = 0.0;
    for (var ki = 0; ki < KH; ki++) {
        let tr = oh + info[11] - ki * info[13];  // = r * sh for the input row r it came from
        if (tr < 0 || tr % sh != 0 || tr / sh >= H) {
            continue;
        }
        let r = tr / sh;
        for (var kj = 0; kj < KW; kj++) {
            let tq = ow + info[12] - kj * info[14];
            if (tq < 0 || tq % sw != 0 || tq / sw >= W) {
                continue;
            }
            let q = tq / sw;
            for (var c = 0; c < cg; c++) {
                acc += x[info[16] + ((n * C + c0 + c) * H + r) * W + q]
                    * y[info[17] + ((c0 + c) * og + ol) * KH * KW + ki * KW + kj];
            }
        }
    }
    out[i] = acc;
}

var<workgroup> partial: array<${T}, 256>;

@compute @workgroup_size(256)
fn conv2d_weight(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = i32(wid.x + wid.y * nwg.x);  // the weight element
    let N = info[0]; let C = info[1]; let H = info[2]; let W = info[3]; let O = info[4];
    let OH = info[5]; let OW = info[6]; let KH = info[7]; let KW = info[8];
    let G = info[15];
    let cg = C / G;
    let valid = e < O * cg * KH * KW;
    var acc: ${T} = 0.0;
    if (valid) {
        let kj = e % KW;
        let ki = (e / KW) % KH;
        let c = (e / (KW * KH)) % cg;
        let o = e / (KW * KH * cg);
        let ch = (o / (O / G)) * cg + c;
        let total = N * OH * OW;
        for (var p = i32(lid); p < total; p += 256) {
            let ow = p % OW;
            let oh = (p / OW) % OH;
            let n = p / (OW * OH);
            let r = oh * info[9] - info[11] + ki * info[13];
            let q = ow * info[10] - info[12] + kj * info[14];
            if (r >= 0 && r < H && q >= 0 && q < W) {
                acc += x[info[16] + ((n * C + ch) * H + r) * W + q]
                    * y[info[17] + ((n * O + o) * OH + oh) * OW + ow];
            }
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (valid && lid == 0u) {
        out[e] = partial[0];
    }
}
