// The vec4 form of fused.wgsl for the common case: every tensor operand dense in the block's
// shape, 16-byte aligned, and a multiple of 4 elements. Each invocation computes PER vec4s of
// the result, 256 vec4s apart so that a workgroup's loads are contiguous: it loads them all
// first (more loads in flight per invocation hide more of the memory's latency), then runs
// the chain on each lane and stores one vec4 per output and vec4. Fields as fused.wgsl, plus
// PER, QUADS (`iU`, the vec4 index; `qT_U = inT[...]` per operand and vec4, then the scalars)
// and LANES (per vec4: the chain once per lane, then `outK[iU] = resK;`).
//! include views.wgsl
//! include lib.wgsl

${OUTPUTS}
${BINDINGS}

@compute @workgroup_size(256)
fn flat4(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let base = i32(wid.x + wid.y * nwg.x) * (256 * ${PER}) + i32(lid);
    let n4 = info[0] / 4;
    if (base >= n4) {
        return;
    }
    let sb = 5 + 2 * ${NT};
    ${QUADS}
    ${LANES}
}
