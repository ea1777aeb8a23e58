// Batched matrix product for row-major operands on GPUs: C = A @ B with K and N multiples of 4
// and 16-byte aligned rows (as matmul_vec4.wgsl). A workgroup of 16x16 invocations computes a
// 128x128 tile of C. Per step of BK=32 along k it stages a 128x32 tile of A (transposed) and a
// 32x128 tile of B in workgroup memory (32 KiB) while the next step's tiles are already being
// loaded into registers; each invocation accumulates an 8x8 block of C (rows ty*4.., 64+ty*4..,
// columns tx*4.., 64+tx*4..: neighbouring invocations read neighbouring vec4s, no bank
// conflicts) from 4 vec4 reads per k (64 FMAs), in 16 accumulators named one by one (an array
// indexed in a loop would be placed in local memory by some drivers). Loads past the edges
// read zeros; stores past them are dropped. T: f32 or i32.
//
// Measured on an NVIDIA H200 (bench/wgpu_ops.py --gpu has the table), 4096^3: 43.3 TFLOP/s,
// 0.84x cuBLAS fp32. What mattered, against this kernel's earlier form (BK=16, 1-D tiles, a
// `for` loop over k: 27.0 TFLOP/s): the tiles as 2-D arrays indexed [k][column] (the bounds
// clamp WebGPU adds to each workgroup-array index then depends on the column alone and leaves
// the loop), the k loop unrolled (left to the driver, the same loop ran 23% slower), BK=32
// (half the barriers) -- 32.5 TFLOP/s with those alone -- then this text: edges handled in
// load_a/load_b (a value returned from a branch, not a zeroed register overwritten in one)
// and the store indices hoisted out of the loop: 43.3 (which of the two gave the most was
// not isolated). Splitting
// the loads so that A is stored as vec4s (no scalar stores), or double-buffering the tiles
// at BK=16, gained nothing.
//
// info: as matmul_vec4.wgsl.
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${T}>>;
@group(1) @binding(1) var<storage, read> lhs: array<vec4<${T}>>;
@group(1) @binding(2) var<storage, read> rhs: array<vec4<${T}>>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

const BK = 32;

var<workgroup> tile_a: array<array<vec4<${T}>, 32>, BK>;  // [k][m / 4]: A transposed
var<workgroup> tile_b: array<array<vec4<${T}>, 32>, BK>;  // [k][n / 4]

// vec4 column `col` of an A row (at `row`, a vec4 index), or zeros past the edges
fn load_a(row: i32, ok: bool, col: i32, k4: i32) -> vec4<${T}> {
    if (ok && col < k4) {
        return lhs[row + col];
    }
    return vec4<${T}>();
}

// row `k` of B at vec4 column `col`, or zeros past the edges
fn load_b(col: i32, ok: bool, k: i32, K: i32, brs: i32) -> vec4<${T}> {
    if (ok && k < K) {
        return rhs[col + k * brs];
    }
    return vec4<${T}>();
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let z = i32(wid.z) + info[10];
    let ab = batch_offsets(z);
    epilogue_begin(z);
    let a0 = ab.x;
    let b0 = ab.y;
    let ars = info[5] / 4;
    let brs = info[8] / 4;
    let n4 = N / 4;
    let k4 = K / 4;
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let t = ty * 16 + tx;
    let m0 = i32(wid.y) * 128;
    let n0 = i32(wid.x) * 128;
    // staged by this invocation: A rows lr, lr + 32, lr + 64, lr + 96 (vec4 column lc of the
    // k step), B rows brow, brow + 8, brow + 16, brow + 24 (vec4 column bc)
    let lr = t / 8;
    let lc = t % 8;
    let brow = t / 32;
    let bc = t % 32;
    let b_col = b0 / 4 + min(n0 / 4 + bc, n4 - 1);
    let b_ok = n0 / 4 + bc < n4;
    //! unroll q 4
    let a_row#q = a0 / 4 + min(m0 + lr + 32 * #q, M - 1) * ars;
    let a_ok#q = m0 + lr + 32 * #q < M;
    var pa#q = load_a(a_row#q, a_ok#q, lc, k4);
    var pb#q = load_b(b_col, b_ok, brow + 8 * #q, K, brs);
    //! end unroll
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
    let ma = lr / 4;
    let mc = lr % 4;
    for (var kt = 0; kt < K; kt += BK) {
        // registers -> workgroup memory (A transposed: k-major)
        //! unroll q 4
        tile_a[lc * 4 + 0][ma + 8 * #q][mc] = pa#q.x;
        tile_a[lc * 4 + 1][ma + 8 * #q][mc] = pa#q.y;
        tile_a[lc * 4 + 2][ma + 8 * #q][mc] = pa#q.z;
        tile_a[lc * 4 + 3][ma + 8 * #q][mc] = pa#q.w;
        tile_b[brow + 8 * #q][bc] = pb#q;
        //! end unroll
        workgroupBarrier();
        // the next step's tiles, loaded while this one is multiplied
        let kn = kt + BK;
        let col = kn / 4 + lc;
        //! unroll q 4
        pa#q = load_a(a_row#q, a_ok#q, col, k4);
        pb#q = load_b(b_col, b_ok, kn + brow + 8 * #q, K, brs);
        //! end unroll
        //! unroll k 32
        {
            let p = tile_a[#k][ty];
            let q = tile_a[#k][16 + ty];
            let u = tile_b[#k][tx];
            let w = tile_b[#k][16 + tx];
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
        //! end unroll
        workgroupBarrier();
    }
    let base = (z * M * N) / 4;
    let c0 = n0 / 4 + tx;
    let c1 = c0 + 16;
    let row0 = m0 + 0 + ty * 4 + 0;
    if (row0 < M) {
        if (c0 < n4) { store4(base + row0 * n4 + c0, row0, 4 * c0, acc00); }
        if (c1 < n4) { store4(base + row0 * n4 + c1, row0, 4 * c1, acc01); }
    }
    let row1 = m0 + 0 + ty * 4 + 1;
    if (row1 < M) {
        if (c0 < n4) { store4(base + row1 * n4 + c0, row1, 4 * c0, acc10); }
        if (c1 < n4) { store4(base + row1 * n4 + c1, row1, 4 * c1, acc11); }
    }
    let row2 = m0 + 0 + ty * 4 + 2;
    if (row2 < M) {
        if (c0 < n4) { store4(base + row2 * n4 + c0, row2, 4 * c0, acc20); }
        if (c1 < n4) { store4(base + row2 * n4 + c1, row2, 4 * c1, acc21); }
    }
    let row3 = m0 + 0 + ty * 4 + 3;
    if (row3 < M) {
        if (c0 < n4) { store4(base + row3 * n4 + c0, row3, 4 * c0, acc30); }
        if (c1 < n4) { store4(base + row3 * n4 + c1, row3, 4 * c1, acc31); }
    }
    let row4 = m0 + 64 + ty * 4 + 0;
    if (row4 < M) {
        if (c0 < n4) { store4(base + row4 * n4 + c0, row4, 4 * c0, acc40); }
        if (c1 < n4) { store4(base + row4 * n4 + c1, row4, 4 * c1, acc41); }
    }
    let row5 = m0 + 64 + ty * 4 + 1;
    if (row5 < M) {
        if (c0 < n4) { store4(base + row5 * n4 + c0, row5, 4 * c0, acc50); }
        if (c1 < n4) { store4(base + row5 * n4 + c1, row5, 4 * c1, acc51); }
    }
    let row6 = m0 + 64 + ty * 4 + 2;
    if (row6 < M) {
        if (c0 < n4) { store4(base + row6 * n4 + c0, row6, 4 * c0, acc60); }
        if (c1 < n4) { store4(base + row6 * n4 + c1, row6, 4 * c1, acc61); }
    }
    let row7 = m0 + 64 + ty * 4 + 3;
    if (row7 < M) {
        if (c0 < n4) { store4(base + row7 * n4 + c0, row7, 4 * c0, acc70); }
        if (c1 < n4) { store4(base + row7 * n4 + c1, row7, 4 * c1, acc71); }
    }
}
