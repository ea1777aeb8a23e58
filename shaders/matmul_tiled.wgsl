// Batched matrix product for row-major operands on GPUs: C = A @ B with K and N multiples of 4
// and 16-byte aligned rows (as matmul_vec4.wgsl). A workgroup of 16x16 invocations computes a
// 128x128 tile of C. Per step of BK=16 along k it stages a 128x16 tile of A (transposed) and a
// 16x128 tile of B in workgroup memory (16 KiB) while the next step's tiles are already being
// loaded into registers; each invocation accumulates an 8x8 block of C (rows ty*4.., 64+ty*4..,
// columns tx*4.., 64+tx*4..: neighbouring invocations read neighbouring vec4s, no bank
// conflicts) from 4 vec4 reads per k (64 FMAs), in 16 accumulators named one by one (an
// array indexed in a loop would be placed in local memory by some drivers). Loads past the edges read zeros; stores past
// them are dropped. T: f32 or i32.
//
// info: as matmul_vec4.wgsl.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${T}>>;
@group(1) @binding(1) var<storage, read> lhs: array<vec4<${T}>>;
@group(1) @binding(2) var<storage, read> rhs: array<vec4<${T}>>;

const BM = 128;
const BN = 128;
const BK = 16;

var<workgroup> tile_a: array<vec4<${T}>, 512>;  // [BK][BM / 4]: A transposed
var<workgroup> tile_b: array<vec4<${T}>, 512>;  // [BK][BN / 4]

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let br = info[3];
    let z = i32(wid.z) + info[10];
    var a0 = info[4];
    var b0 = info[7];
    var rem = z;
    for (var d = br - 1; d >= 0; d--) {
        let size = info[12 + d];
        let c = rem % size;
        rem /= size;
        a0 += c * info[12 + br + d];
        b0 += c * info[12 + 2 * br + d];
    }
    let ars = info[5] / 4;
    let brs = info[8] / 4;
    let n4 = N / 4;
    let k4 = K / 4;
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let t = ty * 16 + tx;
    let m0 = i32(wid.y) * BM;
    let n0 = i32(wid.x) * BN;
    // staged by this invocation: A rows lr and lr + 64 (vec4 column lc of the k step),
    // B rows brow and brow + 8 (vec4 column bc)
    let lr = t / 4;
    let lc = t % 4;
    let brow = t / 32;
    let bc = t % 32;
    let a_row0 = a0 / 4 + min(m0 + lr, M - 1) * ars;
    let a_row1 = a0 / 4 + min(m0 + lr + 64, M - 1) * ars;
    let a_ok0 = m0 + lr < M;
    let a_ok1 = m0 + lr + 64 < M;
    let b_col = b0 / 4 + min(n0 / 4 + bc, n4 - 1);
    let b_ok = n0 / 4 + bc < n4;
    var pa0 = vec4<${T}>();
    var pa1 = vec4<${T}>();
    var pb0 = vec4<${T}>();
    var pb1 = vec4<${T}>();
    if (lc < k4) {
        if (a_ok0) { pa0 = lhs[a_row0 + lc]; }
        if (a_ok1) { pa1 = lhs[a_row1 + lc]; }
    }
    if (b_ok) {
        if (brow < K) { pb0 = rhs[b_col + brow * brs]; }
        if (brow + 8 < K) { pb1 = rhs[b_col + (brow + 8) * brs]; }
    }
    var acc00 = vec4<${T}>();
    var acc01 = vec4<${T}>();
    var acc10 = vec4<${T}>();
    var acc11 = vec4<${T}>();
    var acc20 = vec4<${T}>();
    var acc21 = vec4<${T}>();
    var acc30 = vec4<${T}>();
    var acc31 = vec4<${T}>();
    var acc40 = vec4<${T}>();
    var acc41 = vec4<${T}>();
    var acc50 = vec4<${T}>();
    var acc51 = vec4<${T}>();
    var acc60 = vec4<${T}>();
    var acc61 = vec4<${T}>();
    var acc70 = vec4<${T}>();
    var acc71 = vec4<${T}>();
    for (var kt = 0; kt < K; kt += BK) {
        // registers -> workgroup memory (A transposed: k-major)
        let ma = lr / 4;
        let mc = lr % 4;
        tile_a[(lc * 4 + 0) * 32 + ma][mc] = pa0.x;
        tile_a[(lc * 4 + 1) * 32 + ma][mc] = pa0.y;
        tile_a[(lc * 4 + 2) * 32 + ma][mc] = pa0.z;
        tile_a[(lc * 4 + 3) * 32 + ma][mc] = pa0.w;
        tile_a[(lc * 4 + 0) * 32 + 16 + ma][mc] = pa1.x;
        tile_a[(lc * 4 + 1) * 32 + 16 + ma][mc] = pa1.y;
        tile_a[(lc * 4 + 2) * 32 + 16 + ma][mc] = pa1.z;
        tile_a[(lc * 4 + 3) * 32 + 16 + ma][mc] = pa1.w;
        tile_b[brow * 32 + bc] = pb0;
        tile_b[(brow + 8) * 32 + bc] = pb1;
        workgroupBarrier();
        // the next step's tiles, loaded while this one is multiplied
        let kn = kt + BK;
        pa0 = vec4<${T}>();
        pa1 = vec4<${T}>();
        pb0 = vec4<${T}>();
        pb1 = vec4<${T}>();
        if (kn < K) {
            let col = kn / 4 + lc;
            if (col < k4) {
                if (a_ok0) { pa0 = lhs[a_row0 + col]; }
                if (a_ok1) { pa1 = lhs[a_row1 + col]; }
            }
            if (b_ok) {
                if (kn + brow < K) { pb0 = rhs[b_col + (kn + brow) * brs]; }
                if (kn + brow + 8 < K) { pb1 = rhs[b_col + (kn + brow + 8) * brs]; }
            }
        }
        for (var k = 0; k < BK; k++) {
            let p = tile_a[k * 32 + ty];
            let q = tile_a[k * 32 + 16 + ty];
            let u = tile_b[k * 32 + tx];
            let w = tile_b[k * 32 + 16 + tx];
            acc00 += p.x * u;
            acc01 += p.x * w;
            acc10 += p.y * u;
            acc11 += p.y * w;
            acc20 += p.z * u;
            acc21 += p.z * w;
            acc30 += p.w * u;
            acc31 += p.w * w;
            acc40 += q.x * u;
            acc41 += q.x * w;
            acc50 += q.y * u;
            acc51 += q.y * w;
            acc60 += q.z * u;
            acc61 += q.z * w;
            acc70 += q.w * u;
            acc71 += q.w * w;
        }
        workgroupBarrier();
    }
    let base = (z * M * N) / 4;
    let c0 = n0 / 4 + tx;
    let c1 = c0 + 16;
    let row0 = m0 + 0 + ty * 4 + 0;
    if (row0 < M) {
        if (c0 < n4) { out[base + row0 * n4 + c0] = acc00; }
        if (c1 < n4) { out[base + row0 * n4 + c1] = acc01; }
    }
    let row1 = m0 + 0 + ty * 4 + 1;
    if (row1 < M) {
        if (c0 < n4) { out[base + row1 * n4 + c0] = acc10; }
        if (c1 < n4) { out[base + row1 * n4 + c1] = acc11; }
    }
    let row2 = m0 + 0 + ty * 4 + 2;
    if (row2 < M) {
        if (c0 < n4) { out[base + row2 * n4 + c0] = acc20; }
        if (c1 < n4) { out[base + row2 * n4 + c1] = acc21; }
    }
    let row3 = m0 + 0 + ty * 4 + 3;
    if (row3 < M) {
        if (c0 < n4) { out[base + row3 * n4 + c0] = acc30; }
        if (c1 < n4) { out[base + row3 * n4 + c1] = acc31; }
    }
    let row4 = m0 + 64 + ty * 4 + 0;
    if (row4 < M) {
        if (c0 < n4) { out[base + row4 * n4 + c0] = acc40; }
        if (c1 < n4) { out[base + row4 * n4 + c1] = acc41; }
    }
    let row5 = m0 + 64 + ty * 4 + 1;
    if (row5 < M) {
        if (c0 < n4) { out[base + row5 * n4 + c0] = acc50; }
        if (c1 < n4) { out[base + row5 * n4 + c1] = acc51; }
    }
    let row6 = m0 + 64 + ty * 4 + 2;
    if (row6 < M) {
        if (c0 < n4) { out[base + row6 * n4 + c0] = acc60; }
        if (c1 < n4) { out[base + row6 * n4 + c1] = acc61; }
    }
    let row7 = m0 + 64 + ty * 4 + 3;
    if (row7 < M) {
        if (c0 < n4) { out[base + row7 * n4 + c0] = acc70; }
        if (c1 < n4) { out[base + row7 * n4 + c1] = acc71; }
    }
}
