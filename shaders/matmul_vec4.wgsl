// Batched matrix product for row-major operands: C = A @ B with K and N multiples of 4, every
// row 16-byte aligned, so that A and B are read as vec4. Register-blocked: each invocation
// computes an 8x8 block of C from 8 vec4 loads of A and 8 of B per 4 steps of k (128 FMAs),
// without shared memory or barriers; a workgroup of 8x8 invocations a 64x64 tile. (On lavapipe
// 3x the scalar kernel of matmul.wgsl.) T: f32 or i32.
//
// info (as matmul.wgsl, in elements): [0] M  [1] N  [2] K  [3] batch rank br
//       [4] A offset [5] A row stride [6] unused [7] B offset [8] B row stride [9] unused
//       [10] first batch of this dispatch  [11] unused
//       [12 ..) br batch sizes, br A batch strides, br B batch strides
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${T}>>;
@group(1) @binding(1) var<storage, read> lhs: array<vec4<${T}>>;
@group(1) @binding(2) var<storage, read> rhs: array<vec4<${T}>>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let row0 = i32(gid.y) * 8;
    let col0 = i32(gid.x) * 8;
    if (row0 >= M || col0 >= N) {
        return;
    }
    let z = i32(gid.z) + info[10];
    let ab = batch_offsets(z);
    epilogue_begin(z);
    let a0 = ab.x;
    let b0 = ab.y;
    let ars = info[5] / 4;
    let brs = info[8] / 4;
    let n4 = N / 4;
    let cb0 = b0 / 4 + col0 / 4;
    let cb1 = b0 / 4 + min(col0 / 4 + 1, n4 - 1);  // past the edge: read the last, not stored
    // unrolled by hand, every index a constant: an array indexed in a loop would be placed in
    // local memory by some drivers (NVIDIA), not in registers
    let ra0 = a0 / 4 + min(row0 + 0, M - 1) * ars;
    let ra1 = a0 / 4 + min(row0 + 1, M - 1) * ars;
    let ra2 = a0 / 4 + min(row0 + 2, M - 1) * ars;
    let ra3 = a0 / 4 + min(row0 + 3, M - 1) * ars;
    let ra4 = a0 / 4 + min(row0 + 4, M - 1) * ars;
    let ra5 = a0 / 4 + min(row0 + 5, M - 1) * ars;
    let ra6 = a0 / 4 + min(row0 + 6, M - 1) * ars;
    let ra7 = a0 / 4 + min(row0 + 7, M - 1) * ars;
    var c00 = vec4<${T}>();
    var c01 = vec4<${T}>();
    var c10 = vec4<${T}>();
    var c11 = vec4<${T}>();
    var c20 = vec4<${T}>();
    var c21 = vec4<${T}>();
    var c30 = vec4<${T}>();
    var c31 = vec4<${T}>();
    var c40 = vec4<${T}>();
    var c41 = vec4<${T}>();
    var c50 = vec4<${T}>();
    var c51 = vec4<${T}>();
    var c60 = vec4<${T}>();
    var c61 = vec4<${T}>();
    var c70 = vec4<${T}>();
    var c71 = vec4<${T}>();
    for (var k = 0; k < K / 4; k++) {
        let kb = 4 * k * brs;
        let p0 = rhs[cb0 + kb + 0 * brs];
        let p1 = rhs[cb0 + kb + 1 * brs];
        let p2 = rhs[cb0 + kb + 2 * brs];
        let p3 = rhs[cb0 + kb + 3 * brs];
        let q0 = rhs[cb1 + kb + 0 * brs];
        let q1 = rhs[cb1 + kb + 1 * brs];
        let q2 = rhs[cb1 + kb + 2 * brs];
        let q3 = rhs[cb1 + kb + 3 * brs];
        let a0 = lhs[ra0 + k];
        c00 += a0.x * p0 + a0.y * p1 + a0.z * p2 + a0.w * p3;
        c01 += a0.x * q0 + a0.y * q1 + a0.z * q2 + a0.w * q3;
        let a1 = lhs[ra1 + k];
        c10 += a1.x * p0 + a1.y * p1 + a1.z * p2 + a1.w * p3;
        c11 += a1.x * q0 + a1.y * q1 + a1.z * q2 + a1.w * q3;
        let a2 = lhs[ra2 + k];
        c20 += a2.x * p0 + a2.y * p1 + a2.z * p2 + a2.w * p3;
        c21 += a2.x * q0 + a2.y * q1 + a2.z * q2 + a2.w * q3;
        let a3 = lhs[ra3 + k];
        c30 += a3.x * p0 + a3.y * p1 + a3.z * p2 + a3.w * p3;
        c31 += a3.x * q0 + a3.y * q1 + a3.z * q2 + a3.w * q3;
        let a4 = lhs[ra4 + k];
        c40 += a4.x * p0 + a4.y * p1 + a4.z * p2 + a4.w * p3;
        c41 += a4.x * q0 + a4.y * q1 + a4.z * q2 + a4.w * q3;
        let a5 = lhs[ra5 + k];
        c50 += a5.x * p0 + a5.y * p1 + a5.z * p2 + a5.w * p3;
        c51 += a5.x * q0 + a5.y * q1 + a5.z * q2 + a5.w * q3;
        let a6 = lhs[ra6 + k];
        c60 += a6.x * p0 + a6.y * p1 + a6.z * p2 + a6.w * p3;
        c61 += a6.x * q0 + a6.y * q1 + a6.z * q2 + a6.w * q3;
        let a7 = lhs[ra7 + k];
        c70 += a7.x * p0 + a7.y * p1 + a7.z * p2 + a7.w * p3;
        c71 += a7.x * q0 + a7.y * q1 + a7.z * q2 + a7.w * q3;
    }
    let base = (z * M * N) / 4 + col0 / 4;
    let second = col0 + 4 < N;
    if (row0 + 0 < M) {
        store4(base + (row0 + 0) * n4, row0 + 0, col0, c00);
        if (second) { store4(base + (row0 + 0) * n4 + 1, row0 + 0, col0 + 4, c01); }
    }
    if (row0 + 1 < M) {
        store4(base + (row0 + 1) * n4, row0 + 1, col0, c10);
        if (second) { store4(base + (row0 + 1) * n4 + 1, row0 + 1, col0 + 4, c11); }
    }
    if (row0 + 2 < M) {
        store4(base + (row0 + 2) * n4, row0 + 2, col0, c20);
        if (second) { store4(base + (row0 + 2) * n4 + 1, row0 + 2, col0 + 4, c21); }
    }
    if (row0 + 3 < M) {
        store4(base + (row0 + 3) * n4, row0 + 3, col0, c30);
        if (second) { store4(base + (row0 + 3) * n4 + 1, row0 + 3, col0 + 4, c31); }
    }
    if (row0 + 4 < M) {
        store4(base + (row0 + 4) * n4, row0 + 4, col0, c40);
        if (second) { store4(base + (row0 + 4) * n4 + 1, row0 + 4, col0 + 4, c41); }
    }
    if (row0 + 5 < M) {
        store4(base + (row0 + 5) * n4, row0 + 5, col0, c50);
        if (second) { store4(base + (row0 + 5) * n4 + 1, row0 + 5, col0 + 4, c51); }
    }
    if (row0 + 6 < M) {
        store4(base + (row0 + 6) * n4, row0 + 6, col0, c60);
        if (second) { store4(base + (row0 + 6) * n4 + 1, row0 + 6, col0 + 4, c61); }
    }
    if (row0 + 7 < M) {
        store4(base + (row0 + 7) * n4, row0 + 7, col0, c70);
        if (second) { store4(base + (row0 + 7) * n4 + 1, row0 + 7, col0 + 4, c71); }
    }
}
