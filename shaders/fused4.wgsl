// The vec4 form of fused.wgsl for the common case: every tensor operand dense in the block's
// shape, 16-byte aligned, and a multiple of 4 elements. Each invocation loads one vec4 per
// operand, runs the chain on its 4 lanes and stores one vec4 per output (as elementwise4.wgsl
// does for one op). Fields as fused.wgsl, plus QUADS (`let qT = inT[...]` per tensor operand,
// then the scalars), RESULTS (`var resK` per output), LANES (the chain once per lane) and
// STORES (`outK[i] = resK;`).
//! include views.wgsl
//! include lib.wgsl

${OUTPUTS}
${BINDINGS}

@compute @workgroup_size(256)
fn flat4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0] / 4) {
        return;
    }
    let sb = 5 + 2 * ${NT};
    ${QUADS}
    ${RESULTS}
    ${LANES}
    ${STORES}
}
