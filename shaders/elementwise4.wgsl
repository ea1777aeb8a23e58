// The vec4 form of elementwise.wgsl for the common case: every operand dense in the result's
// shape, 16-byte aligned, and a multiple of 4 elements. Each invocation loads one vec4 per
// operand, applies the op's scalar expression to the 4 lanes, and stores one vec4 (on an H200,
// 3.9 TB/s for an add against 3.0 with one element per invocation). Fields as elementwise.wgsl,
// plus QUADS (`let qT = inT[...]` per tensor operand) and LANES (the body once per lane).
//! include views.wgsl
//! include lib.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<vec4<${OUT}>>;
${BINDINGS}

@compute @workgroup_size(256)
fn flat4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0] / 4) {
        return;
    }
    let sb = 5 + 2 * ${NT};
    ${QUADS}
    var res: vec4<${OUT}>;
    ${LANES}
    out[i] = res;
}
