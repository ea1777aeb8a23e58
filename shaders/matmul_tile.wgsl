// Batched matrix product for row-major operands on GPUs (K and N multiples of 4, 16-byte
// aligned rows, as matmul_vec4.wgsl), in tile shapes the host generates (runners._tile_source:
// the default "tiled" and the candidates ember.autotune measures). A workgroup of WX x WY
// invocations computes a BM x BN tile of C; each invocation RA groups of 4 rows (ty + WY r)
// times TN vec4 columns (tx + WX c), so that neighbouring invocations read neighbouring vec4s
// (no bank conflicts), in accumulators named one by one (an array indexed in a loop would be
// placed in local memory by some drivers). Per step of BK along k, A (transposed) and B are
// staged in workgroup memory while the next step is loaded into registers: 4 BK (BM + BN)
// bytes, twice that double-buffered (two sets of tiles: the next step is staged into one while
// this one is multiplied from the other, one barrier a step instead of two). Loads past the
// edges read zeros (load_a/load_b); stores past them are dropped. T: f32 or i32.
//
// What mattered on an NVIDIA H200 (the default 128x128, BK=32, 8x8 an invocation: 43.3
// TFLOP/s at 4096^3, 0.84x cuBLAS fp32, against 27.0 for its first form, BK=16, 1-D tiles, a
// `for` loop over k): the tiles as 2-D arrays indexed [k][column] (the bounds clamp WebGPU
// adds to each workgroup-array index then depends on the column alone and leaves the loop),
// the k loop unrolled (left to the driver it ran 23% slower), BK=32 (half the barriers), the
// edges handled in load_a/load_b (a value returned from a branch, not a zeroed register
// overwritten in one) and the store indices hoisted out of the loop.
//
// Split-k: info[11] = S splits; workgroup z = batch * S + split computes the products of its
// k range into its own [M, N] of a partial result that a sum over the splits completes.
// info: as matmul_vec4.wgsl, with [11] S.
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${T}>>;
@group(1) @binding(1) var<storage, read> lhs: array<vec4<${T}>>;
@group(1) @binding(2) var<storage, read> rhs: array<vec4<${T}>>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

const BK = ${BK};

${TILES}

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

@compute @workgroup_size(${WX}, ${WY})
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let M = info[0];
    let N = info[1];
    let K = info[2];
    let splits = info[11];
    let p = i32(wid.z) + info[10] * splits;
    let z = p / splits;
    let ab = batch_offsets(z);
    epilogue_begin(z);
    let a0 = ab.x;
    let b0 = ab.y;
    let ars = info[5] / 4;
    let brs = info[8] / 4;
    let n4 = N / 4;
    // this split's k range, whole steps of BK
    let span = (K + splits * BK - 1) / (splits * BK) * BK;
    let k_first = (p % splits) * span;
    let k_end = min(K, k_first + span);
    let k4 = k_end / 4;
    let t = i32(lid.y) * ${WX} + i32(lid.x);
    // this invocation's outputs: rows of ty, columns of tx (runners._tile_source: "w" tiles
    // lay a warp's lanes out 8 x 4)
${LANES}
    let m0 = i32(wid.y) * ${BM};
    let n0 = i32(wid.x) * ${BN};
    // staged by this invocation: A rows lr + AS q (vec4 column lc of the k step), B rows
    // brow + BS q (vec4 column bc); "p" tiles: lanes in pairs along a row, 32 bytes each, so
    // that a warp's transposing stores meet 2 to a bank, not BK / 4 (A rows of 128 floats)
${STAGING}
    let brow = t / ${BN4};
    let bc = t % ${BN4};
    let b_col = b0 / 4 + min(n0 / 4 + bc, n4 - 1);
    let b_ok = n0 / 4 + bc < n4;
    //! unroll q ${LA}
    let a_row#q = a0 / 4 + min(m0 + lr + ${AS} * #q, M - 1) * ars;
    let a_ok#q = m0 + lr + ${AS} * #q < M;
    var pa#q = load_a(a_row#q, a_ok#q, k_first / 4 + lc, k4);
    //! end unroll
    //! unroll q ${LB}
    var pb#q = load_b(b_col, b_ok, k_first + brow + ${BS} * #q, k_end, brs);
    //! end unroll
${ACC}
    let ma = lr / 4;
    let mc = lr % 4;
${LOOP}
    let base = (p * M * N) / 4;
${STORES}
}
