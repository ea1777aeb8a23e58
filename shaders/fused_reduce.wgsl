// A reduction (sum, max, min, argmax, argmin) whose input is a chain of elementwise ops
// (ember.fusion's fuse-on-read): each element the reduction reads is computed from the chain's
// tensor operands in registers, so the chain's result never goes to memory. As reduce.wgsl,
// with every operand's kept and reduced strides in `info`:
// info: [0] outputs  [1] elements reduced per output  [2] kept rank rk  [3] reduced rank rr
//       [4] unused  [5] chunks  [6] chunk length  [7 .. 7+rk) kept sizes, then rr reduced
//       sizes; then per operand t: its offset, rk kept strides, rr reduced strides; then the
//       chain's scalars.
// Fields as reduce.wgsl (T: the chain's result type), plus BINDINGS (`inT`), NT, KEPT (each
// operand's kept offset of output o into kb[T]) and ELEMENT (the chain at reduced index r).
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${OUT}>;
${BINDINGS}

struct Acc {
    v: ${T},
    i: i32,
}

var<private> kb: array<i32, ${NT}>;

fn value_is_nan(x: ${T}) -> bool {
    return ${NAN};
}

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

fn set_kept(o: i32) {
    let rk = info[2];
    let rr = info[3];
    ${KEPT}
}

fn element(r: i32) -> Acc {
    let rk = info[2];
    let rr = info[3];
    let sb = 7 + rk + rr + ${NT} * (1 + rk + rr);
    ${ELEMENT}
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
        set_kept(o / info[5]);
        let first = (o % info[5]) * info[6];
        let end = min(first + info[6], info[1]);
        acc = ${INIT};
        for (var r = first + i32(lid); r < end; r += 256) {
            acc = combine(acc, element(r));
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
    set_kept(o / info[5]);
    let first = (o % info[5]) * info[6];
    let end = min(first + info[6], info[1]);
    var a = ${INIT};
    for (var r = first; r < end; r++) {
        a = combine(a, element(r));
    }
    out[o] = ${RESULT};
}
