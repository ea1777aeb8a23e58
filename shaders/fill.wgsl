// Fill a strided view (view 0) with one 32-bit value, info[3]: full, zeros, slice_assign of a
// scalar.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> dst: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    dst[view_offset(0, i)] = info[3];
}
