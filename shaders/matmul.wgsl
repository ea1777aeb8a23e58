// Batched matrix product C = A @ B with A and B read through strides (a transposed operand
// costs nothing), batch dims broadcast. Register-blocked: each invocation computes a 4x4 block
// of C from 4 + 4 loads per k, without shared memory or barriers (the fast shape on CPU
// adapters, lavapipe and SwiftShader). T: f32 or i32.
//
// info: [0] M  [1] N  [2] K  [3] batch rank br
//       [4] A offset [5] A row stride [6] A col stride [7] B offset [8] B row stride [9] B col stride
//       [10] first batch of this dispatch  [11] unused
//       [12 ..) br batch sizes, br A batch strides, br B batch strides
// C is dense: batch z at z * M * N.
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${T}>;
@group(1) @binding(1) var<storage, read> lhs: array<${T}>;
@group(1) @binding(2) var<storage, read> rhs: array<${T}>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let row0 = i32(gid.y) * 4;
    let col0 = i32(gid.x) * 4;
    if (row0 >= M || col0 >= N) {
        return;
    }
    let z = i32(gid.z) + info[10];
    let ab = batch_offsets(z);
    epilogue_begin(z);
    let a0 = ab.x;
    let b0 = ab.y;
    let ars = info[5];
    let acs = info[6];
    let brs = info[8];
    let bcs = info[9];
    // rows and columns past the edge read the last valid one; their results are not stored
    let a_0 = a0 + min(row0, M - 1) * ars;
    let a_1 = a0 + min(row0 + 1, M - 1) * ars;
    let a_2 = a0 + min(row0 + 2, M - 1) * ars;
    let a_3 = a0 + min(row0 + 3, M - 1) * ars;
    let b_0 = b0 + min(col0, N - 1) * bcs;
    let b_1 = b0 + min(col0 + 1, N - 1) * bcs;
    let b_2 = b0 + min(col0 + 2, N - 1) * bcs;
    let b_3 = b0 + min(col0 + 3, N - 1) * bcs;
    var c0 = vec4<${T}>();
    var c1 = vec4<${T}>();
    var c2 = vec4<${T}>();
    var c3 = vec4<${T}>();
    for (var k = 0; k < K; k++) {
        let ka = k * acs;
        let kb = k * brs;
        let b = vec4<${T}>(rhs[b_0 + kb], rhs[b_1 + kb], rhs[b_2 + kb], rhs[b_3 + kb]);
        c0 += lhs[a_0 + ka] * b;
        c1 += lhs[a_1 + ka] * b;
        c2 += lhs[a_2 + ka] * b;
        c3 += lhs[a_3 + ka] * b;
    }
    let base = z * M * N + row0 * N + col0;
    let rows = min(M - row0, 4);
    let cols = min(N - col0, 4);
    for (var c = 0; c < cols; c++) {
        store1(base + c, row0, col0 + c, c0[c]);
        if (rows > 1) { store1(base + N + c, row0 + 1, col0 + c, c1[c]); }
        if (rows > 2) { store1(base + 2 * N + c, row0 + 2, col0 + c, c2[c]); }
        if (rows > 3) { store1(base + 3 * N + c, row0 + 3, col0 + c, c3[c]); }
    }
}
