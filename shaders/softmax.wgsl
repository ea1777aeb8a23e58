// A fused softmax over the last dim (the custom-op example of ember.backends.wgpu.custom):
// one workgroup per row makes three passes over it (max, sum of exp, normalise) in one kernel,
// where the composite Tensor.softmax runs five.
// info: [0] rows  [1] cols  [2] the input's element offset. Input and output are dense.
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<${T}>;
@group(1) @binding(1) var<storage, read> x: array<${T}>;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = i32(wid.x + wid.y * nwg.x);
    let valid = row < info[0];
    let cols = info[1];
    let src = info[2] + row * cols;
    let dst = row * cols;
    var m = bitcast<f32>(0xff7fffffu);  // -FLT_MAX (Tint refuses -3.4028235e38: past it)
    if (valid) {
        for (var c = i32(lid); c < cols; c += 256) {
            m = max(m, x[src + c]);
        }
    }
    partial[lid] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] = max(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    m = partial[0];
    workgroupBarrier();
    var total = 0.0;
    if (valid) {
        for (var c = i32(lid); c < cols; c += 256) {
            total += exp(x[src + c] - m);
        }
    }
    partial[lid] = total;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    total = partial[0];
    if (valid) {
        for (var c = i32(lid); c < cols; c += 256) {
            out[dst + c] = exp(x[src + c] - m) / total;
        }
    }
}
