// Strided views: the addressing every generated and most hand-written kernels share.
//
// `info` (bind group 0, a dynamic offset per dispatch) holds a dispatch's parameters as i32:
//   info[0] numel    info[1] rank    info[2] 1 when every view is dense (flat indexing)
//   info[3] a kernel's own scalar (a fill value, the stride of a gathered dim, ...)
//   info[4 .. 4+rank)                       the shape the views share (the output's)
//   view k at b = 4 + rank + k * (rank + 1): info[b] its element offset, info[b+1 ..] its strides
// Strides are in elements and may be 0 (broadcast) or negative (reversed slices).

@group(0) @binding(0) var<storage, read> info: array<i32>;

// The element of view k at linear (C-order) index i of the shared shape.
fn view_offset(k: i32, i: i32) -> i32 {
    let rank = info[1];
    let b = 4 + rank + k * (rank + 1);
    if (info[2] != 0) {
        return info[b] + i;
    }
    var at = info[b];
    var rem = i;
    for (var d = rank - 1; d >= 0; d--) {
        let size = info[4 + d];
        let q = rem / size;
        at += (rem - q * size) * info[b + 1 + d];
        rem = q;
    }
    return at;
}

// Linear invocation index of a 1-D problem dispatched as (x, y) workgroups of 256.
fn linear_index(gid: vec3<u32>, nwg: vec3<u32>) -> i32 {
    return i32(gid.x + gid.y * nwg.x * 256u);
}
