// The skeleton of a fused kernel: a chain of elementwise ops (ember.fusion) computed per
// element in registers, each op's WGSL expression from the op table, only the chain's outputs
// written. One kernel per chain of ops, operand dtypes and scalar positions, never per shape:
// shapes, strides and the scalars travel in `info`. Fields:
//   OUTPUTS   one read-write storage buffer per output (`out0`, `out1`, ...)
//   BINDINGS  one read-only storage buffer per tensor operand (`in0`, `in1`, ...), after them
//   NT        the number of tensor operands (views); the scalars follow them in `info`
//   LOADS     the strided entry's walk over i's coordinates (operand t's element: `atT`), then
//             `let vT = ...;` per tensor operand and `let sJ = ...;` per scalar
//   FLAT_LOADS the same for the flat entry (operand t's element: its offset + i)
//   BODY      `var rJ = <op J's expression>;` per op, with its NaN rules
//   STORES    `outK[i] = ...;` per output
//! include views.wgsl
//! include lib.wgsl

${OUTPUTS}
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
    ${STORES}
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
    ${STORES}
}
