"""Curves without a plotting library: Braille-dot charts for the terminal dashboard, and a
PNG of every metric written with NumPy and zlib alone (so it works wherever ember does,
Pyodide included).
"""

import struct
import zlib

import numpy as np

__all__ = ["binned", "braille_chart", "write_curves_png"]

TRAIN_RGB, TRAIN_LIGHT_RGB, VALID_RGB = (31, 119, 180), (174, 199, 232), (255, 127, 14)


def binned(xs, ys, lo, hi, bins):
    """The mean of ys in each of `bins` equal x-bins over [lo, hi]: (centres, means), empty
    bins left out. Smooths noisy per-batch values into one point per column."""
    xs, ys = np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)
    if xs.size == 0 or bins < 1:
        return xs[:0], ys[:0]
    span = hi - lo if hi > lo else 1.0
    idx = np.clip(((xs - lo) / span * bins).astype(np.intp), 0, bins - 1)  # intp: wasm32
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=ys, minlength=bins)
    xsum = np.bincount(idx, weights=xs, minlength=bins)
    keep = counts > 0
    return xsum[keep] / counts[keep], sums[keep] / counts[keep]


def _limits(values, pad=0.05):
    values = [v for v in values if v.size]
    if not values:
        return 0.0, 1.0
    lo = min(float(np.min(v)) for v in values)
    hi = max(float(np.max(v)) for v in values)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5 * max(abs(lo), 1e-3), hi + 0.5 * max(abs(hi), 1e-3)
    margin = (hi - lo) * pad
    return lo - margin, hi + margin


def _segments(px, py):
    """Integer points along the polyline through (px, py) (each segment sampled densely)."""
    if len(px) == 1:
        return px.astype(np.int64), py.astype(np.int64)
    outs_x, outs_y = [], []
    for x0, y0, x1, y1 in zip(px[:-1], py[:-1], px[1:], py[1:]):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        t = np.linspace(0.0, 1.0, n + 1)
        outs_x.append(np.rint(x0 + (x1 - x0) * t))
        outs_y.append(np.rint(y0 + (y1 - y0) * t))
    return np.concatenate(outs_x).astype(np.int64), np.concatenate(outs_y).astype(np.int64)


# ---- terminal: Braille dots -----------------------------------------------------------------
_DOT = np.array([[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]])  # [row][col]


def braille_chart(series, width, height, xlim=None, ylim=None):
    """A chart of `series` [(xs, ys, tag), ...] in width x height character cells, each cell
    2x4 Braille dots. Returns (rows: list of str, tags: list of lists of the tag that drew
    each cell or None, (xlo, xhi), (ylo, yhi)). Later series draw over earlier ones."""
    width, height = max(int(width), 2), max(int(height), 2)
    dots_w, dots_h = 2 * width, 4 * height
    prepared = [(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), tag)
                for xs, ys, tag in series]
    prepared = [(xs[np.isfinite(ys)], ys[np.isfinite(ys)], tag) for xs, ys, tag in prepared]
    xlo, xhi = xlim if xlim else _limits([xs for xs, _, _ in prepared], pad=0.0)
    binned_series = [(*binned(xs, ys, xlo, xhi, dots_w), tag) for xs, ys, tag in prepared]
    ylo, yhi = ylim if ylim else _limits([ys for _, ys, _ in binned_series])
    bits = np.zeros((height, width), dtype=np.int64)
    tags = [[None] * width for _ in range(height)]
    for xs, ys, tag in binned_series:
        if xs.size == 0:
            continue
        px = (xs - xlo) / ((xhi - xlo) or 1.0) * (dots_w - 1)
        py = (yhi - ys) / ((yhi - ylo) or 1.0) * (dots_h - 1)
        dx, dy = _segments(px, py)
        ok = (dx >= 0) & (dx < dots_w) & (dy >= 0) & (dy < dots_h)
        dx, dy = dx[ok], dy[ok]
        np.bitwise_or.at(bits, (dy // 4, dx // 2), _DOT[dy % 4, dx % 2])
        for r, c in set(zip((dy // 4).tolist(), (dx // 2).tolist())):
            tags[r][c] = tag
    rows = ["".join(chr(0x2800 + int(b)) if b else " " for b in row) for row in bits]
    return rows, tags, (xlo, xhi), (ylo, yhi)


# ---- PNG ------------------------------------------------------------------------------------
_FONT = {  # 5x7 glyphs, rows top to bottom, "#" = ink
    "0": ".###.#...##..###.#.###..##...#.###.", "1": "..#...##....#....#....#....#...###.",
    "2": ".###.#...#....#...#...#...#...#####", "3": "#####...#...#.....#.....##...#.###.",
    "4": "...#...##..#.#.#..#.#####...#....#.", "5": "######....####.....#....##...#.###.",
    "6": "..##..#...#....####.#...##...#.###.", "7": "#####....#...#...#...#....#....#...",
    "8": ".###.#...##...#.###.#...##...#.###.", "9": ".###.#...##...#.####....#...#..##..",
    "A": ".###.#...##...#######...##...##...#", "B": "####.#...##...#####.#...##...#####.",
    "C": ".###.#...##....#....#....#...#.###.", "D": "###..#..#.#...##...##...##..#.###..",
    "E": "######....#....####.#....#....#####", "F": "######....#....####.#....#....#....",
    "G": ".###.#...##....#.####...##...#.####", "H": "#...##...##...#######...##...##...#",
    "I": ".###...#....#....#....#....#...###.", "J": "..###...#....#....#....##..#..##...",
    "K": "#...##..#.#.#..##...#.#..#..#.#...#", "L": "#....#....#....#....#....#....#####",
    "M": "#...###.###.#.##...##...##...##...#", "N": "#...##...###..##.#.##..###...##...#",
    "O": ".###.#...##...##...##...##...#.###.", "P": "####.#...##...#####.#....#....#....",
    "Q": ".###.#...##...##...##.#.##..#..##.#", "R": "####.#...##...#####.#.#..#..#.#...#",
    "S": ".####.....#.....###.....#....#####.", "T": "#####..#....#....#....#....#....#..",
    "U": "#...##...##...##...##...##...#.###.", "V": "#...##...##...##...##...#.#.#...#..",
    "W": "#...##...##...##.#.##.#.##.#.#.#.#.", "X": "#...##...#.#.#...#...#.#.#...##...#",
    "Y": "#...##...#.#.#...#....#....#....#..", "Z": "#####....#...#...#...#...#....#####",
    ".": "..............................##...", ",": ".........................##...#..#.",
    ":": ".......##...##.........##...##.....", "%": "##...##..#...#...#...#...#..##...##",
    "-": "...............#####...............", "/": ".........#...#...#...#...#.........",
    "(": "...#...#...#....#....#.....#.....#.", ")": ".#.....#.....#....#....#...#...#...",
    "_": "..............................#####", "+": ".......#....#..#####..#....#.......",
    "=": "..........#####.....#####..........", " ": "." * 35,
    "?": ".###.#...#....#...#....#.........#.",
    "<": "...#...#...#...#.....#.....#.....#.", ">": ".#.....#.....#.....#...#...#...#...",
    "|": "..#....#....#....#....#....#....#..",
}


def _text(img, x, y, text, rgb, scale=2):
    """Draw `text` (upper-cased) with its top-left corner at (x, y)."""
    h, w = img.shape[:2]
    for ch in text.upper():
        glyph = _FONT.get(ch) or _FONT["?"]
        cells = np.array([c == "#" for c in glyph]).reshape(7, 5)
        big = np.kron(cells, np.ones((scale, scale), dtype=bool))
        ys, xs = np.nonzero(big)
        ys, xs = ys + y, xs + x
        ok = (ys >= 0) & (ys < h) & (xs >= 0) & (xs < w)
        img[ys[ok], xs[ok]] = rgb
        x += 6 * scale
    return x


def _text_width(text, scale=2):
    return 6 * scale * len(text)


def _polyline(img, px, py, rgb, thick=2, box=None):
    if len(px) == 0:
        return
    xs, ys = _segments(np.asarray(px, dtype=np.float64), np.asarray(py, dtype=np.float64))
    x0, y0, x1, y1 = box if box else (0, 0, img.shape[1] - 1, img.shape[0] - 1)
    for ox in range(thick):
        for oy in range(thick):
            cx, cy = xs + ox, ys + oy
            ok = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1)
            img[cy[ok], cx[ok]] = rgb


def _markers(img, px, py, rgb, r=3, box=None):
    x0, y0, x1, y1 = box if box else (0, 0, img.shape[1] - 1, img.shape[0] - 1)
    for cx, cy in zip(np.rint(px).astype(int), np.rint(py).astype(int)):
        img[max(cy - r, y0):min(cy + r, y1) + 1, max(cx - r, x0):min(cx + r, x1) + 1] = rgb


def _label(value, percent):
    if percent:
        return f"{value * 100:.1f}%"
    return f"{value:.3g}"


def _panel(img, box, history, metric, percent):
    """One metric's chart inside box (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    ink, grid = (40, 40, 40), (225, 225, 225)
    _text(img, x0 + 70, y0 + 4, metric, ink)
    ax0, ay0, ax1, ay1 = x0 + 70, y0 + 26, x1 - 10, y1 - 26
    tx, ty = history.series(metric, "train")
    vx, vy = history.series(metric, "valid")
    te = history.epoch_values(metric, "train")
    ve = history.epoch_values(metric, "valid")
    lx = x1 - 10
    for label, rgb, present in (("VALID", VALID_RGB, vx.size or ve), ("TRAIN", TRAIN_RGB,
                                                                      tx.size or te)):
        if present:  # the legend, right-aligned: only the splits this metric has
            lx -= _text_width(label)
            _text(img, lx, y0 + 4, label, ink)
            img[y0 + 9:y0 + 13, lx - 22:lx - 4] = rgb
            lx -= 34
    ex = [np.array([e + 1 for e in sorted(d)], dtype=np.float64) for d in (te, ve)]
    ey = [np.array([d[e] for e in sorted(d)], dtype=np.float64) for d in (te, ve)]
    bins = max(ax1 - ax0, 2) // 3
    xmax = max([1.0] + [float(a.max()) for a in (tx, vx, *ex) if a.size])
    btx, bty = binned(tx, ty, 0.0, xmax, bins)
    ylo, yhi = _limits([bty, ey[0], ey[1], binned(vx, vy, 0.0, xmax, bins)[1]])
    img[ay0:ay1 + 1, ax0] = ink
    img[ay1, ax0:ax1 + 1] = ink

    def sx(x):
        return ax0 + (np.asarray(x) / xmax) * (ax1 - ax0)

    def sy(y):
        return ay1 - (np.asarray(y) - ylo) / (yhi - ylo) * (ay1 - ay0)
    for k in range(5):  # horizontal grid and y labels
        v = ylo + (yhi - ylo) * k / 4
        row = int(round(float(sy(v))))
        if k:
            img[row, ax0 + 1:ax1 + 1] = grid
        text = _label(v, percent)
        _text(img, ax0 - 8 - _text_width(text, 1), row - 3, text, ink, 1)
    step = max(1, int(np.ceil(xmax / 10)))
    for e in range(0, int(np.floor(xmax)) + 1, step):  # x ticks at whole epochs
        col = int(round(float(sx(e))))
        img[ay1:ay1 + 5, col] = ink
        _text(img, col - _text_width(str(e), 1) // 2, ay1 + 8, str(e), ink, 1)
    _text(img, ax1 - _text_width("EPOCH", 1), ay1 + 16, "EPOCH", ink, 1)
    box_in = (ax0 + 1, ay0, ax1, ay1 - 1)
    _polyline(img, sx(btx), sy(bty), TRAIN_LIGHT_RGB, thick=1, box=box_in)
    if vx.size and not ve:
        bvx, bvy = binned(vx, vy, 0.0, xmax, bins)
        _polyline(img, sx(bvx), sy(bvy), VALID_RGB, thick=1, box=box_in)
    for (xs, ys), rgb in zip(zip(ex, ey), (TRAIN_RGB, VALID_RGB)):
        if xs.size:
            _polyline(img, sx(xs), sy(ys), rgb, thick=2, box=box_in)
            _markers(img, sx(xs), sy(ys), rgb, box=box_in)


def write_png(path, rgb):
    """Write an RGB uint8 image [H, W, 3] as a PNG file."""
    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = rgb.shape[:2]
    raw = np.concatenate([np.zeros((h, 1), dtype=np.uint8), rgb.reshape(h, w * 3)], axis=1)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(png)


def write_curves_png(history, path, metrics=None, title="ember train", columns=2):
    """A PNG with one chart per metric (train and valid curves: per-batch values lightly,
    epoch values with markers). `metrics`: Metric objects (their order and percent flags)."""
    names = [m.name for m in metrics] if metrics else history.names()
    names = [n for n in names if n in history.points]
    percent = {m.name: m.percent for m in metrics or []}
    if not names:
        names = ["Loss"]
    columns = max(1, min(columns, len(names)))
    rows = -(-len(names) // columns)
    pw, ph, top = 560, 300, 40
    img = np.full((top + rows * ph, columns * pw, 3), 255, dtype=np.uint8)
    _text(img, 16, 12, title, (0, 0, 0))
    for k, name in enumerate(names):
        r, c = divmod(k, columns)
        _panel(img, (c * pw, top + r * ph, (c + 1) * pw - 1, top + (r + 1) * ph - 1), history,
               name, percent.get(name, False))
    write_png(path, img)
    return path
