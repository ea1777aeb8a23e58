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
    // unrolled (//! unroll), every index a constant: an array indexed in a loop would be
    // placed in local memory by some drivers (NVIDIA), not in registers
    //! unroll r 8
    let ra#r = a0 / 4 + min(row0 + #r, M - 1) * ars;
    var c#r0 = vec4<${T}>();
    var c#r1 = vec4<${T}>();
    //! end unroll
    for (var k = 0; k < K / 4; k++) {
        let kb = 4 * k * brs;
        //! unroll j 4
        let p#j = rhs[cb0 + kb + #j * brs];
        let q#j = rhs[cb1 + kb + #j * brs];
        //! end unroll
        //! unroll r 8
        let a#r = lhs[ra#r + k];
        c#r0 += a#r.x * p0 + a#r.y * p1 + a#r.z * p2 + a#r.w * p3;
        c#r1 += a#r.x * q0 + a#r.y * q1 + a#r.z * q2 + a#r.w * q3;
        //! end unroll
    }
    let base = (z * M * N) / 4 + col0 / 4;
    let second = col0 + 4 < N;
    //! unroll r 8
    if (row0 + #r < M) {
        store4(base + (row0 + #r) * n4, row0 + #r, col0, c#r0);
        if (second) { store4(base + (row0 + #r) * n4 + 1, row0 + #r, col0 + 4, c#r1); }
    }
    //! end unroll
}
