// Copy a strided view into another (view 0: destination, view 1: source), 32-bit words of any
// dtype: makes views dense, writes cat's parts and slice_assign's values into their regions.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> dst: array<u32>;
@group(1) @binding(1) var<storage, read> src: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    dst[view_offset(0, i)] = src[view_offset(1, i)];
}
