// The vec4 form of fused_rows.wgsl, for rows of a multiple of 4 elements that every view read
// or written along the row walks densely and 16-byte aligned: the row is read from memory
// once, as vec4s kept in registers through every pass. A row has info[4] invocations (a power
// of two up to 256: short rows share a workgroup, 256 / info[4] rows each), each holding PER
// vec4s of it, info[4] apart so that neighbours read neighbouring vec4s; each pass runs the
// chain on every lane of them, and a reduction ends with a tree in workgroup memory within
// the row's invocations. Fields and `info` as fused_rows.wgsl (info[4]: invocations a row),
// plus CHUNKS (`jK`: an invocation's vec4 K in its row, `bV`: view V's row start in vec4s).
//! include views.wgsl
//! include lib.wgsl

${OUTPUTS}
${BINDINGS}
${SHARED}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tpr = u32(info[4]);
    let loc = lid & (tpr - 1u);
    let o = i32((wid.x + wid.y * nwg.x) * (256u / tpr) + lid / tpr);
    // (the invocations of a row past the last one load nothing, but meet every barrier)
    let n4 = select(0, info[1] / 4, o < info[0]);
    let rk = info[2];
    let rr = info[3];
    let sb = 7 + rk + rr + ${NT} * (1 + rk + rr);
    ${SCALARS}
    ${KEPT}
    ${CHUNKS}
    ${PASSES}
}
