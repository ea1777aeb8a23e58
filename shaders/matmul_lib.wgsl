// Shared by the matmul kernels (info layout of matmul.wgsl).
//! include views.wgsl
//! include lib.wgsl

// The element offsets (A, B) of batch z's matrices: z unravelled over the br batch dims, each
// with its own A and B stride (0 where that operand is broadcast).
fn batch_offsets(z: i32) -> vec2<i32> {
    let br = info[3];
    var a0 = info[4];
    var b0 = info[7];
    var rem = z;
    for (var d = br - 1; d >= 0; d--) {
        let size = info[12 + d];
        let c = rem % size;
        rem /= size;
        a0 += c * info[12 + br + d];
        b0 += c * info[12 + 2 * br + d];
    }
    return vec2<i32>(a0, b0);
}
