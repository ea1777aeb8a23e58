// A row kernel of ember.fusion: reductions over the same dims and what reads their results
// back in the reduced row (softmax: max, then the sum of exp(x - max), then exp(x - max) / sum;
// layer_norm: mean, variance, normalized x), in one kernel. A workgroup per row (an index of
// the kept dims): one pass over the row per reduction, each computing the reduction's input
// from the tensor operands in registers and reducing it across the workgroup, then a last
// pass that computes and writes the outputs. The row is read from memory once per pass; after
// the first it comes from the cache (rows that allow vec4s take fused_rows4.wgsl instead,
// which reads them once). Kernels are keyed by the chain, never by shapes:
// info: [0] rows  [1] elements per row  [2] kept rank rk  [3] reduced rank rr  [4..7) unused
//       [7 .. 7+rk) kept sizes, then rr reduced sizes; then per view (the tensor operands, then
//       the outputs): its offset, rk kept strides, rr reduced strides; then the scalars.
// Fields: OUTPUTS (`outK`), BINDINGS (`inT`), NT (the number of views), SHARED (per reduction
// its workgroup array and combine function), KEPT (each view's offset at this row: `kbV`),
// SCALARS (`let sJ`), PASSES (the passes: `accP`/`redP` the reductions, then the stores).
//! include views.wgsl
//! include lib.wgsl

${OUTPUTS}
${BINDINGS}
${SHARED}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = i32(wid.x + wid.y * nwg.x);
    // (a workgroup past the last row runs empty passes: every invocation meets the barriers)
    let nr = select(0, info[1], o < info[0]);
    let rk = info[2];
    let rr = info[3];
    let sb = 7 + rk + rr + ${NT} * (1 + rk + rr);
    ${SCALARS}
    ${KEPT}
    ${PASSES}
}
