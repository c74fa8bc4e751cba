#!/usr/bin/env python3
"""Print the share of pixels of a PNG (8-bit RGB or RGBA, as rsvg-convert writes) that
are not near-white: a blank picture gives 0. decode() gives the pixels themselves (view_ranks.py
measures columns with it). Standard library only."""
import struct
import sys
import zlib


def decode(path):
    """The PNG's width, height, bytes per pixel and rows (each a bytearray of w * bpp bytes, unfiltered)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "only 8-bit RGB/RGBA"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride, prev, rows = w * bpp, bytearray(w * bpp), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def main(path):
    w, h, bpp, rows = decode(path)
    ink = 0
    for line in rows:
        for x in range(w):
            px = line[x * bpp:x * bpp + 3]
            if bpp == 4 and line[x * bpp + 3] < 128:
                continue
            if min(px) < 200:
                ink += 1
    print("%.4f" % (ink / (w * h)))


if __name__ == "__main__":
    main(sys.argv[1])
