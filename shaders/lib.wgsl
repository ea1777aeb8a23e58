// Functions the op table's WGSL expressions call (op_erf, op_pow) and NaN/inf helpers.
//
// WGSL lets implementations assume finite math (naga compiles `x != x` to an ordered compare,
// which is false for NaN), so NaN and inf are recognised by their bits, never by comparisons.

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

fn sign_bit(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x80000000u) != 0u;
}

// (through a `let`: a constant expression that makes NaN or inf is a shader-creation error in
// Tint, Chrome's WGSL compiler; naga lets it pass)
fn f32_nan() -> f32 {
    let bits = 0x7fc00000u;
    return bitcast<f32>(bits);
}

fn f32_inf() -> f32 {
    let bits = 0x7f800000u;
    return bitcast<f32>(bits);
}

// erf with the float32 coefficients of ember/ops/numerics.py, inserted by the host (ERF), so
// that the reference and the kernel share them.
fn op_erf(x: f32) -> f32 {
    ${ERF}
}

// The exact GELU (the op table's gelu): x * (1 + erf(x / sqrt(2))) / 2.
fn op_gelu(x: f32) -> f32 {
    return 0.5 * x * (1.0 + op_erf(x * 0.70710678118654752));
}

// GELU'(x) = Phi(x) + x phi(x) with Phi read from y = gelu(x) = x Phi(x) (the gelu_grad op),
// near 0 Phi's series 1/2 + x / sqrt(2 pi) (y / x has lost its digits there)
fn op_gelu_grad(x: f32, y: f32) -> f32 {
    let x2 = x * x;
    let series = 0.5 + x * 0.3989422804014327;
    let cdf = select(y / x, series, x2 < 1e-6);
    return cdf + x * 0.3989422804014327 * exp(-0.5 * x2);
}

// NumPy's power for float32, special values included (C99 pow): WGSL's pow is only defined
// for a positive base.
fn op_pow(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) {
        return 1.0;
    }
    if (is_nan(a) || is_nan(b)) {
        return f32_nan();
    }
    let ab = abs(a);
    if (is_inf(b)) {
        if (ab == 1.0) {
            return 1.0;
        }
        return select(f32_inf(), 0.0, (ab < 1.0) == (b > 0.0));
    }
    var r: f32;
    if (ab == 0.0) {
        r = select(f32_inf(), 0.0, b > 0.0);
    } else if (is_inf(ab)) {
        r = select(0.0, f32_inf(), b > 0.0);
    } else {
        r = exp2(b * log2(ab));
    }
    if (sign_bit(a)) {
        let whole = floor(b) == b;
        if (!whole && ab != 0.0 && !is_inf(ab)) {
            return f32_nan();
        }
        if (whole && abs(b) < 16777216.0 && fract(b * 0.5) != 0.0) {
            r = -r;
        }
    }
    return r;
}

// sin and cos accurate to ~1 ulp for |x| up to a few thousand (Cephes' sinf/cosf: reduction
// to an octant with pi/4 split in three parts, then a short polynomial). WGSL only bounds the
// builtins' error inside [-pi, pi] (NVIDIA's sin(100) is off by 1e-5 relative); the kernel
// generator calls these wherever an op's expression calls sin or cos.
fn sin_poly(x: f32) -> f32 {
    let z = x * x;
    return ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * x + x;
}

fn cos_poly(x: f32) -> f32 {
    let z = x * x;
    return ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2)
        * z * z - 0.5 * z + 1.0;
}

struct Octant {
    r: f32,   // the argument reduced to [-pi/4, pi/4]
    j: u32,   // its octant pair, 0..3
    flip: bool,
}

fn octant(ax: f32) -> Octant {
    var j = u32(ax * 1.27323954473516);  // 4 / pi
    var y = f32(j);
    if ((j & 1u) == 1u) {
        j += 1u;
        y += 1.0;
    }
    j = j & 7u;
    var flip = false;
    if (j > 3u) {
        j -= 4u;
        flip = true;
    }
    let r = ((ax - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
    return Octant(r, j, flip);
}

fn precise_sin(x: f32) -> f32 {
    if (is_inf(x) || is_nan(x)) {
        return f32_nan();
    }
    let o = octant(abs(x));
    var s = sin_poly(o.r);
    if (o.j == 1u || o.j == 2u) {
        s = cos_poly(o.r);
    }
    return select(s, -s, o.flip != (x < 0.0) || (x == 0.0 && sign_bit(x)));
}

fn precise_cos(x: f32) -> f32 {
    if (is_inf(x) || is_nan(x)) {
        return f32_nan();
    }
    let o = octant(abs(x));
    var c = cos_poly(o.r);
    if (o.j == 1u || o.j == 2u) {
        c = sin_poly(o.r);
    }
    return select(c, -c, o.flip != (o.j > 1u));
}

// log and sqrt outside their domain: WGSL leaves the result to the implementation
// (SwiftShader's log(-2) is log(2)); NumPy gives NaN, and -inf for log(0)
fn precise_log(x: f32) -> f32 {
    if (x < 0.0) {
        return f32_nan();
    }
    if (x == 0.0) {
        return -f32_inf();
    }
    if (is_inf(x)) {
        return x;
    }
    return log(x);
}

fn precise_sqrt(x: f32) -> f32 {
    if (x < 0.0) {
        return f32_nan();
    }
    return sqrt(x);
}

// tanh for large |x|: SwiftShader computes it from exponentials, which overflow to inf/inf
fn precise_tanh(x: f32) -> f32 {
    if (abs(x) > 9.0) {  // 1 - tanh(9) is below float32's spacing at 1
        return select(1.0, -1.0, x < 0.0);
    }
    return tanh(x);
}
