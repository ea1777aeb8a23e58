// Reductions (sum, max, min, argmax, argmin) over any set of dims of a strided input.
//
// info: [0] outputs  [1] elements reduced per output  [2] kept rank rk  [3] reduced rank rr
//       [4] the input's element offset  [5] chunks  [6] chunk length
//       [7 .. 7+rk) kept sizes, then rk kept strides; then rr reduced sizes, rr reduced strides
// The host coalesces dims, so a reduction over a dense trailing dim has rr = 1. With chunks > 1
// (a long sum, max or min into few outputs), output o holds chunk o % chunks of kept element
// o / chunks (per_thread_cm: chunk o / kept of kept element o % kept), and a second dispatch
// reduces the chunks: many workgroups share the work.
// Fields: T (storage/value type), OUT (output storage type), NAN (is `x` NaN, for T),
// INIT (the accumulator before any element: 0 for sums, element 0 otherwise: max/min are
// idempotent and element 0 has the lowest index), COMBINE (merge b into a), RESULT (what to
// store: a.v or a.i). Ties and NaNs follow NumPy: NaN wins, the first index wins.
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${OUT}>;
@group(1) @binding(1) var<storage, read> src: array<${T}>;

struct Acc {
    v: ${T},
    i: i32,
}

fn value_is_nan(x: ${T}) -> bool {
    return ${NAN};
}

// true when b comes before a in the order this reduction picks (its `better`)
fn better(b: Acc, a: Acc) -> bool {
    if (value_is_nan(a.v)) {
        return value_is_nan(b.v) && b.i < a.i;
    }
    if (value_is_nan(b.v)) {
        return true;
    }
    return b.v ${CMP} a.v || (b.v == a.v && b.i < a.i);
}

fn combine(a: Acc, b: Acc) -> Acc {
    ${COMBINE}
}

fn kept_offset(o: i32) -> i32 {
    let rk = info[2];
    var at = info[4];
    var rem = o;
    for (var d = rk - 1; d >= 0; d--) {
        let size = info[7 + d];
        let q = rem / size;
        at += (rem - q * size) * info[7 + rk + d];
        rem = q;
    }
    return at;
}

fn element(base: i32, r: i32) -> Acc {
    let rk = info[2];
    let rr = info[3];
    let b = 7 + 2 * rk;
    if (rr == 1) {  // one reduced dim (the host coalesces): no division
        return Acc(src[base + r * info[b + 1]], r);
    }
    var at = base;
    var rem = r;
    for (var d = rr - 1; d >= 0; d--) {
        let size = info[b + d];
        let q = rem / size;
        at += (rem - q * size) * info[b + rr + d];
        rem = q;
    }
    return Acc(src[at], r);
}

var<workgroup> partial: array<Acc, 256>;

// One workgroup per output: long reductions.
@compute @workgroup_size(256)
fn per_group(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = i32(wid.x + wid.y * nwg.x);
    let valid = o < info[0];
    var acc: Acc;
    if (valid) {
        let base = kept_offset(o / info[5]);
        let first = (o % info[5]) * info[6];
        let end = min(first + info[6], info[1]);
        acc = ${INIT};
        for (var r = first + i32(lid); r < end; r += 256) {
            acc = combine(acc, element(base, r));
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] = combine(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    if (valid && lid == 0u) {
        let a = partial[0];
        out[o] = ${RESULT};
    }
}

// One invocation per output: many short reductions.
@compute @workgroup_size(256)
fn per_thread(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = linear_index(gid, nwg);
    if (o >= info[0]) {
        return;
    }
    let base = kept_offset(o / info[5]);
    let first = (o % info[5]) * info[6];
    let end = min(first + info[6], info[1]);
    var a = ${INIT};
    for (var r = first; r < end; r++) {
        a = combine(a, element(base, r));
    }
    out[o] = ${RESULT};
}

// One invocation per output and chunk, chunk-major: neighbouring invocations reduce
// neighbouring outputs, which a reduction over a leading dim (a column sum) reads side by side.
@compute @workgroup_size(256)
fn per_thread_cm(@builtin(global_invocation_id) gid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = linear_index(gid, nwg);
    if (o >= info[0]) {
        return;
    }
    let kept = info[0] / info[5];
    let base = kept_offset(o % kept);
    let first = (o / kept) * info[6];
    let end = min(first + info[6], info[1]);
    var a = ${INIT};
    for (var r = first; r < end; r++) {
        a = combine(a, element(base, r));
    }
    out[o] = ${RESULT};
}
