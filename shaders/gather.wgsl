// out[i] = src[view 0 at i + index[view 1 at i] * info[3]]: torch.gather along one dim, and
// index_select (`select`) with the 1-D indices seen through a broadcasting view. View 0 is the
// source with the gathered dim's stride set to 0; info[3] is that dim's real stride. 32-bit
// words of any dtype. Indices were checked on the host (in range), never here.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<u32>;
@group(1) @binding(1) var<storage, read> src: array<u32>;
@group(1) @binding(2) var<storage, read> index: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    if (i >= info[0]) {
        return;
    }
    out[i] = src[view_offset(0, i) + index[view_offset(1, i)] * info[3]];
}
