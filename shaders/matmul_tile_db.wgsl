// matmul_tile.wgsl double-buffered: two sets of tiles in workgroup memory, so that the next
// step is staged into one while this step is multiplied from the other, with one barrier per
// step instead of two. Workgroup memory: 8 BK (BM + BN) bytes, at most 16 KiB. The k loop runs
// two steps an iteration (one per set), each named by the host (runners._tile_source: FMA0,
// FMA1 read set 0, set 1).
// info: as matmul_tile.wgsl.
//! include matmul_lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${T}>>;
@group(1) @binding(1) var<storage, read> lhs: array<vec4<${T}>>;
@group(1) @binding(2) var<storage, read> rhs: array<vec4<${T}>>;

// C's store, generated (kernels.epilogue_source): out[i] = v, or a fused epilogue
${EPILOGUE}

const BK = ${BK};

var<workgroup> tile_a0: array<array<vec4<${T}>, ${BM4}>, BK>;  // [k][m / 4]: A transposed
var<workgroup> tile_b0: array<array<vec4<${T}>, ${BN4}>, BK>;  // [k][n / 4]
var<workgroup> tile_a1: array<array<vec4<${T}>, ${BM4}>, BK>;
var<workgroup> tile_b1: array<array<vec4<${T}>, ${BN4}>, BK>;

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
    let tx = i32(lid.x);
    let ty = i32(lid.y);
    let t = ty * ${WX} + tx;
    let m0 = i32(wid.y) * ${BM};
    let n0 = i32(wid.x) * ${BN};
    // staged by this invocation: A rows lr + AS q (vec4 column lc of the k step), B rows
    // brow + BS q (vec4 column bc)
    let lr = t / (BK / 4);
    let lc = t % (BK / 4);
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
    // registers -> set 0 (A transposed: k-major)
    //! unroll q ${LA}
    tile_a0[lc * 4 + 0][ma + ${AS4} * #q][mc] = pa#q.x;
    tile_a0[lc * 4 + 1][ma + ${AS4} * #q][mc] = pa#q.y;
    tile_a0[lc * 4 + 2][ma + ${AS4} * #q][mc] = pa#q.z;
    tile_a0[lc * 4 + 3][ma + ${AS4} * #q][mc] = pa#q.w;
    //! end unroll
    //! unroll q ${LB}
    tile_b0[brow + ${BS} * #q][bc] = pb#q;
    //! end unroll
    workgroupBarrier();
    for (var kt = k_first; kt < k_end; kt += 2 * BK) {
        // step kt from set 0 while step kt + BK is loaded and staged into set 1
        //! unroll q ${LA}
        pa#q = load_a(a_row#q, a_ok#q, (kt + BK) / 4 + lc, k4);
        //! end unroll
        //! unroll q ${LB}
        pb#q = load_b(b_col, b_ok, kt + BK + brow + ${BS} * #q, k_end, brs);
        //! end unroll
        //! unroll k ${BK}
        {
${FMA0}
        }
        //! end unroll
        //! unroll q ${LA}
        tile_a1[lc * 4 + 0][ma + ${AS4} * #q][mc] = pa#q.x;
        tile_a1[lc * 4 + 1][ma + ${AS4} * #q][mc] = pa#q.y;
        tile_a1[lc * 4 + 2][ma + ${AS4} * #q][mc] = pa#q.z;
        tile_a1[lc * 4 + 3][ma + ${AS4} * #q][mc] = pa#q.w;
        //! end unroll
        //! unroll q ${LB}
        tile_b1[brow + ${BS} * #q][bc] = pb#q;
        //! end unroll
        workgroupBarrier();
        if (kt + BK >= k_end) {
            break;
        }
        // step kt + BK from set 1 while step kt + 2 BK is loaded and staged into set 0
        //! unroll q ${LA}
        pa#q = load_a(a_row#q, a_ok#q, (kt + 2 * BK) / 4 + lc, k4);
        //! end unroll
        //! unroll q ${LB}
        pb#q = load_b(b_col, b_ok, kt + 2 * BK + brow + ${BS} * #q, k_end, brs);
        //! end unroll
        //! unroll k ${BK}
        {
${FMA1}
        }
        //! end unroll
        //! unroll q ${LA}
        tile_a0[lc * 4 + 0][ma + ${AS4} * #q][mc] = pa#q.x;
        tile_a0[lc * 4 + 1][ma + ${AS4} * #q][mc] = pa#q.y;
        tile_a0[lc * 4 + 2][ma + ${AS4} * #q][mc] = pa#q.z;
        tile_a0[lc * 4 + 3][ma + ${AS4} * #q][mc] = pa#q.w;
        //! end unroll
        //! unroll q ${LB}
        tile_b0[brow + ${BS} * #q][bc] = pb#q;
        //! end unroll
        workgroupBarrier();
    }
    let base = (p * M * N) / 4;
${STORES}
}
