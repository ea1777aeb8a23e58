// Adam's update of one parameter (ops/optim.py adam): out = [x', m', v'], each n elements, from
// the parameter x, its gradient g and the previous result s = [_, m, v], in torch.optim.Adam's
// arithmetic (lerp, addcmul, addcdiv). Every input is dense from its own element offset.
// info: [0] n  [1] x's offset  [2] g's offset  [3] s's offset; then f32 bits of the scalars
//       [4] w = 1 - beta1  [5] 1 - beta2  [6] beta2  [7] sqrt(1 - beta2^t)  [8] eps
//       [9] step = -lr / (1 - beta1^t)
//! include views.wgsl

@group(1) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(1) var<storage, read> x: array<f32>;
@group(1) @binding(2) var<storage, read> g: array<f32>;
@group(1) @binding(3) var<storage, read> s: array<f32>;

fn scalar(k: i32) -> f32 {
    return bitcast<f32>(info[4 + k]);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear_index(gid, nwg);
    let n = info[0];
    if (i >= n) {
        return;
    }
    let gi = g[info[2] + i];
    let m0 = s[info[3] + n + i];
    let v0 = s[info[3] + 2 * n + i];
    let w = scalar(0);
    let d = gi - m0;
    var m = m0 + w * d;
    if (abs(w) >= 0.5) {
        m = gi - d * (1.0 - w);
    }
    let v = v0 * scalar(2) + scalar(1) * gi * gi;
    let denom = sqrt(v) / scalar(3) + scalar(4);
    out[i] = x[info[1] + i] + scalar(5) * m / denom;
    out[n + i] = m;
    out[2 * n + i] = v;
}
