#!/usr/bin/env python3
"""Counts the pixels of given colours in a PNG (8-bit RGB or RGBA, non-interlaced), standard
library only: the admin page test looks for its tables' header colours in Chromium's screenshot.

usage: png_colors.py FILE R,G,B [R,G,B ...]
prints "size WIDTH HEIGHT", then one line per colour: "R,G,B COUNT RIGHTMOST", RIGHTMOST the
largest x of a pixel of that colour (-1 if none): a table whose header colour reaches the
screenshot's right edge runs past the window.
A pixel counts when each channel is within 2 of the colour (anti-aliasing at the edges aside).
"""
import struct
import sys
import zlib


def read_png(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit("not a PNG: " + path)
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace != 0:
        raise SystemExit("unsupported PNG: depth %d colour type %d interlace %d" % (depth, colour, interlace))
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous, offset = [], bytearray(stride), 0
    for _ in range(height):
        kind = raw[offset]
        line = bytearray(raw[offset + 1:offset + 1 + stride])
        offset += 1 + stride
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                predictor = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + predictor) & 0xFF
        rows.append(line)
        previous = line
    return width, height, channels, rows


def main():
    path, colours = sys.argv[1], [tuple(int(v) for v in arg.split(",")) for arg in sys.argv[2:]]
    width, height, channels, rows = read_png(path)
    counts = [0] * len(colours)
    rightmost = [-1] * len(colours)
    for line in rows:
        for x in range(width):
            r, g, b = line[x * channels], line[x * channels + 1], line[x * channels + 2]
            for index, (cr, cg, cb) in enumerate(colours):
                if abs(r - cr) <= 2 and abs(g - cg) <= 2 and abs(b - cb) <= 2:
                    counts[index] += 1
                    rightmost[index] = max(rightmost[index], x)
    print("size %d %d" % (width, height))
    for (cr, cg, cb), count, right in zip(colours, counts, rightmost):
        print("%d,%d,%d %d %d" % (cr, cg, cb, count, right))


if __name__ == "__main__":
    main()
