// Batched matrix product for narrow C (few columns, e.g. a classifier's [256,128] x [128,10]),
// any strides (as matmul.wgsl, whose info layout it shares). The register-blocked kernels give
// such a product a handful of invocations, each looping over all of k; here a workgroup of 64
// splits k instead: invocation t sums k = t, t + 64, ... for a 4x4 block of C (consecutive k
// across the workgroup: A's rows are read coalesced), then the 64 partial blocks are added up
// in workgroup memory. One workgroup per 4x4 block. T: f32 or i32.
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${T}>;
@group(1) @binding(1) var<storage, read> lhs: array<${T}>;
@group(1) @binding(2) var<storage, read> rhs: array<${T}>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

var<workgroup> part: array<array<vec4<${T}>, 64>, 4>;  // [row][invocation]: partial rows

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let t = i32(lid);
    let row0 = i32(wid.y) * 4;
    let col0 = i32(wid.x) * 4;
    let z = i32(wid.z) + info[10];
    let ab = batch_offsets(z);
    epilogue_begin(z);
    let ars = info[5];
    let acs = info[6];
    let brs = info[8];
    let bcs = info[9];
    // rows and columns past the edge read the last valid one; their results are not stored
    //! unroll r 4
    let a_#r = ab.x + min(row0 + #r, M - 1) * ars;
    let b_#r = ab.y + min(col0 + #r, N - 1) * bcs;
    var c#r = vec4<${T}>();
    //! end unroll
    for (var k = t; k < K; k += 64) {
        let kb = k * brs;
        let b = vec4<${T}>(rhs[b_0 + kb], rhs[b_1 + kb], rhs[b_2 + kb], rhs[b_3 + kb]);
        //! unroll r 4
        c#r += lhs[a_#r + k * acs] * b;
        //! end unroll
    }
    //! unroll r 4
    part[#r][t] = c#r;
    //! end unroll
    workgroupBarrier();
    for (var s = 32; s > 0; s >>= 1u) {
        if (t < s) {
            //! unroll r 4
            part[#r][t] += part[#r][t + s];
            //! end unroll
        }
        workgroupBarrier();
    }
    // invocation t < 16 stores C's element (row0 + t / 4, col0 + t % 4)
    let row = row0 + t / 4;
    let col = col0 + t % 4;
    if (t < 16 && row < M && col < N) {
        store1(z * M * N + row * N + col, row, col, part[t / 4][0][t % 4]);
    }
}
