// The three convolution primitives of ember/ops/nn.py as implicit GEMMs (conv.wgsl computes the
// same sums directly, one output a thread): C[m, j] = sum_k A[m, k] * B[k, j], A and B gathered
// from the tensors as they are (no im2col copy), per group g of the convolution.
//   MODE 0, conv2d:           m: output channel o of g, j: output pixel (n, oh, ow),
//                             k: (c, ki, kj); A = w, B = x's window elements (zero outside)
//   MODE 1, conv_transpose2d: m, j as conv2d; k: (c, ki, kj) of x's channels, B = x at the
//                             input pixel that output pixel (oh, ow) takes through (ki, kj)
//   MODE 2, conv2d_weight:    m: o, j: (c, ki, kj), k: the pixel (n, oh, ow) of g (the output
//                             gradient), A = g, B = x's window elements; the pixels are split
//                             into info[19] chunks of info[20], each chunk's sums stored apart
//                             in out [chunks, O, C/G * KH * KW] (the host sums them then)
// A workgroup of 256 invocations computes a TM x TN tile of C, RA x RC vec4s a thread (4 * RA
// rows (ty + WY * r) * 4 + i, 4 * RC columns (tx + WX * c) * 4 + l: 64x64 and 32x128 tiles of
// 4x4, 64x128 of 4x8 or 8x4; the fields ACC, FMA and STORES are written for RA and RC by
// runners._conv_tile_code), stepping BK=16 along k through two tiles in workgroup memory, the
// next step's elements loaded into registers while this one is multiplied (as
// matmul_tile.wgsl). Workgroups: (j tiles, m tiles, groups * chunks). A thread stages PA of
// A's elements and PB of B's a step.
//
// info: conv.wgsl's words [0..18], then [19] chunks [20] pixels a chunk (a multiple of BK),
// then the epilogue's words. STORE: the store of C's element, `store(i, n, o, p, v)` (conv2d's
// bias and fused epilogue: kernels.conv_store_source), DECLS its bindings.
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(1) var<storage, read> x: array<f32>;
@group(1) @binding(2) var<storage, read> y: array<f32>;
${DECLS}

const MODE = ${MODE};
const BK = 16;
const TM = ${TM};
const TN = ${TN};
const PA = TM / 16;   // A's rows a thread stages: am + 16 * q
const PB = TN / 16;   // B's elements a thread stages (MODE 0, 1: k rows bk + RB * q)
const RB = 256 / TN;
const WX = TN / (4 * ${RC});  // the threads across a tile's columns, and down its rows
const WY = TM / (4 * ${RA});
// the kernel's size and stride are constants of the kernel (divisions by them are cheap: the
// gathers' index arithmetic is per element; the ConvNet's conv2 input gradient at batch 128
// took 0.227 ms with them read from info, 0.124 ms so, on the H200); the channels a group, set
// once by main
const KH = ${KH};
const KW = ${KW};
const SH = ${SH};
const SW = ${SW};
var<private> CG: i32;  // C / G
var<private> OG: i32;  // O / G

var<workgroup> tile_a: array<array<vec4<f32>, ${TM4}>, BK>;  // [k][m / 4]
var<workgroup> tile_b: array<array<vec4<f32>, ${TN4}>, BK>;  // [k][j / 4]

${STORE}

// x at window row r, column q of channel plane `plane` (an element offset), zero outside
fn window(plane: i32, r: i32, q: i32) -> f32 {
    if (r >= 0 && r < info[2] && q >= 0 && q < info[3]) {
        return x[plane + r * info[3] + q];
    }
    return 0.0;
}

// B[k, j] of MODE 0 and 1 for a column whose pixel's window starts at (r0, q0) (MODE 1: its
// output pixel's row and column plus the padding), on x's channel planes from `xb`
fn gather(ok: bool, k: i32, xb: i32, r0: i32, q0: i32) -> f32 {
    if (!ok || k >= CG * KH * KW) {
        return 0.0;
    }
    let c = k / (KH * KW);
    let kk = k - c * KH * KW;
    let ki = kk / KW;
    let kj = kk - ki * KW;
    let plane = xb + c * info[2] * info[3];
    if (MODE == 0) {
        return window(plane, r0 + ki * info[13], q0 + kj * info[14]);
    }
    let tr = r0 - ki * info[13];
    let tq = q0 - kj * info[14];
    if (tr < 0 || tq < 0 || tr % SH != 0 || tq % SW != 0) {
        return 0.0;
    }
    return window(plane, tr / SH, tq / SW);
}

// A[m, k] of MODE 0 (w [O, C/G, KH, KW]) and 1 (w [C, O/G, KH, KW]) for output channel o of g
fn weight(ok: bool, o: i32, k: i32, g: i32) -> f32 {
    const KHW = KH * KW;
    let cg = CG;
    if (!ok || k >= cg * KHW) {
        return 0.0;
    }
    let og = OG;
    if (MODE == 0) {
        return y[info[17] + (g * og + o) * cg * KHW + k];
    }
    let c = k / KHW;
    return y[info[17] + ((g * cg + c) * og + o) * KHW + k - c * KHW];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let N = info[0]; let C = info[1]; let H = info[2]; let W = info[3]; let O = info[4];
    let OH = info[5]; let OW = info[6];
    let G = info[15];
    let cg = C / G;
    let og = O / G;
    CG = cg;
    OG = og;
    let OHW = OH * OW;
    let chunks = info[19];
    let g = i32(wid.z) / chunks;
    let chunk = i32(wid.z) - g * chunks;
    let t = i32(lid);
    let tx = t % WX;
    let ty = t / WX;
    let m0 = i32(wid.y) * TM;
    let j0 = i32(wid.x) * TN;
    var NJ = N * OHW;           // columns
    var kb = 0;                 // this workgroup's k range
    var ke = cg * KH * KW;
    if (MODE == 2) {
        NJ = cg * KH * KW;
        kb = chunk * info[20];
        ke = min(kb + info[20], N * OHW);
    }
    // staged by this thread: A at k step row t % 16, rows am + 16 * q; B (MODE 0, 1) at
    // column bj, k step rows t / TN + RB * q; B (MODE 2) at k row t % 16, columns am + 16 * q
    let ak = t % 16;
    let am = t / 16;
    // MODE 0, 1: the one column this thread stages, its pixel's window origin and planes
    let bj = j0 + t % TN;
    let bk = t / TN;
    let bn = bj / max(OHW, 1);
    let bp = bj - bn * OHW;
    let b_ok = bj < NJ;
    var r0 = (bp / OW) * SH - info[11];
    var q0 = (bp % OW) * SW - info[12];
    if (MODE == 1) {
        r0 = bp / OW + info[11];
        q0 = bp % OW + info[12];
    }
    let xb = info[16] + (bn * C + g * cg) * H * W;
    // MODE 2: the PB columns' (channel plane, kernel row and column offsets)
    var cp: array<vec3<i32>, 8>;
    var c_ok: array<bool, 8>;
    //! unroll q 8
    if (#q < PB) {
        let j = j0 + am + 16 * #q;
        let c = j / (KH * KW);
        let kk = j - c * KH * KW;
        cp[#q] = vec3<i32>((g * cg + c) * H * W, (kk / KW) * info[13] - info[11],
                           (kk % KW) * info[14] - info[12]);
        c_ok[#q] = j < NJ;
    }
    //! end unroll
    var pa: array<f32, 8>;
    var pb: array<f32, 8>;
${ACC}
    for (var kt = kb; kt < ke; kt += BK) {
        // this step's elements into registers (the first step's; later steps' are loaded
        // before the multiplication below)
        if (kt == kb) {
            load(&pa, &pb, kt, ke, g, m0, og, am, ak, bk, b_ok, xb, r0, q0, &cp, &c_ok);
        }
        //! unroll q 8
        if (#q < PA) {
            tile_a[ak][(am + 16 * #q) / 4][(am + 16 * #q) % 4] = pa[#q];
        }
        //! end unroll
        if (MODE == 2) {
            //! unroll q 8
            if (#q < PB) {
                tile_b[ak][(am + 16 * #q) / 4][(am + 16 * #q) % 4] = pb[#q];
            }
            //! end unroll
        } else {
            //! unroll q 8
            if (#q < PB) {
                tile_b[bk + RB * #q][(t % TN) / 4][t % 4] = pb[#q];
            }
            //! end unroll
        }
        workgroupBarrier();
        if (kt + BK < ke) {
            load(&pa, &pb, kt + BK, ke, g, m0, og, am, ak, bk, b_ok, xb, r0, q0, &cp, &c_ok);
        }
${FMA}
        workgroupBarrier();
    }
    // C's rows m0 + (ty + WY * r) * 4 + i, columns j0 + (tx + WX * c) * 4 ..
${STORES}
}

// C's row m (of group g, chunk `chunk`), columns j .. j + 3
fn store_row(g: i32, chunk: i32, m: i32, j: i32, v: vec4<f32>) {
    let O = info[4];
    let og = OG;
    let OHW = info[5] * info[6];
    var NJ = info[0] * OHW;
    if (MODE == 2) {
        NJ = CG * KH * KW;
    }
    if (m >= og) {
        return;
    }
    let o = g * og + m;
    // the image and pixel of column j, one division for the four (then stepped)
    var n = j / OHW;
    var p = j - n * OHW;
    //! unroll l 4
    if (j + #l < NJ) {
        if (MODE == 2) {
            out[(chunk * O + o) * NJ + j + #l] = v[#l];
        } else {
            store((n * O + o) * OHW + p, n, o, p, v[#l]);
        }
    }
    p += 1;
    if (p == OHW) {
        p = 0;
        n += 1;
    }
    //! end unroll
}

// the registers staged for the k step from kt: A's PA rows, B's PB elements
fn load(pa: ptr<function, array<f32, 8>>, pb: ptr<function, array<f32, 8>>, kt: i32, ke: i32,
        g: i32, m0: i32, og: i32, am: i32, ak: i32, bk: i32, b_ok: bool, xb: i32, r0: i32,
        q0: i32, cp: ptr<function, array<vec3<i32>, 8>>, c_ok: ptr<function, array<bool, 8>>) {
    if (MODE == 2) {
        // the pixel k of g's output gradient, shared by the A and B elements of this thread
        let k = kt + ak;
        let OW = info[6];
        let OHW = info[5] * OW;
        let n = k / OHW;
        let p = k - n * OHW;
        let oh = p / OW;
        let ow = p - oh * OW;
        let ok = k < ke;
        let xn = info[16] + n * info[1] * info[2] * info[3];
        //! unroll q 8
        if (#q < PA) {
            let o = m0 + am + 16 * #q;
            (*pa)[#q] = select(0.0, y[info[17] + (n * info[4] + g * og + o) * OHW + p],
                               ok && o < og);
        }
        if (#q < PB) {
            let c = (*cp)[#q];
            if (ok && (*c_ok)[#q]) {
                (*pb)[#q] = window(xn + c.x, oh * SH + c.y, ow * SW + c.z);
            } else {
                (*pb)[#q] = 0.0;
            }
        }
        //! end unroll
        return;
    }
    //! unroll q 8
    if (#q < PA) {
        (*pa)[#q] = weight(m0 + am + 16 * #q < og, m0 + am + 16 * #q, kt + ak, g);
    }
    if (#q < PB) {
        (*pb)[#q] = gather(b_ok, kt + bk + RB * #q, xb, r0, q0);
    }
    //! end unroll
}
