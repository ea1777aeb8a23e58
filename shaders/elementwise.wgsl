// The skeleton of every elementwise kernel. The host fills it from one op's WGSL expression in
// the op table (ember/ops: "exp({0})", "({0} + {1})", ...): one kernel per op, operand dtypes
// and scalar positions, never per shape or rank. Fields:
//   OUT       the output's storage type (f32, i32; u32 for bool)
//   BINDINGS  one read-only storage buffer per tensor operand (`in0`, `in1`, ...)
//   NT        the number of tensor operands (views); Python scalars follow them in `info`
//   LOADS     the strided entry's walk over i's coordinates (operand t's element: `atT`), then
//             `let vK = ...;` per operand: a tensor's element or a scalar from `info[sb + j]`
//   FLAT_LOADS the same for the flat entry (operand t's element: its offset + i)
//   BODY      `var r = <the op's expression>;` plus NaN rules derived from the NumPy reference
//   STORE     r in the output's storage type
// Two entry points: `flat` when every operand is dense in the result's shape (no index
// arithmetic: on lavapipe the mere presence of the strided loop halves the bandwidth), and
// `main` for anything strided or broadcast.
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${OUT}>;
${BINDINGS}

@compute @workgroup_size(256)
fn flat(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    let sb = 5 + 2 * ${NT};
    ${FLAT_LOADS}
    ${BODY}
    out[i] = ${STORE};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    let rank = info[1];
    let sb = 4 + rank + ${NT} * (rank + 1);
    ${LOADS}
    ${BODY}
    out[i] = ${STORE};
}
