// out[view 0 at i + index[view 1 at i] * info[3]] += values[view 2 at i], over the indices'
// shape; duplicate indices add up (atomics). `out` already holds a copy of the input, dense.
// ADD is the atomic update for the dtype: a compare-exchange loop for f32 (WebGPU has no
// float atomics), atomicAdd for i32, atomicOr for bool (NumPy's add on bools is "or").
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<atomic<${ATOMIC}>>;
@group(1) @binding(1) var<storage, read> index: array<i32>;
@group(1) @binding(2) var<storage, read> values: array<${T}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    let t = view_offset(0, i) + index[view_offset(1, i)] * info[3];
    let v = values[view_offset(2, i)];
    ${ADD}
}
