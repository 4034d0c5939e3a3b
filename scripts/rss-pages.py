#!/usr/bin/env python3
"""Where a process's resident memory is, page by page (docs/benchmarks.md, "Resident memory").

  scripts/rss-pages.py snap PID OUT.json       smaps + present-page bitmaps of the file mappings
                                               (/proc/PID/pagemap bit 63), as now
  scripts/rss-pages.py watch PID OUT.json      the same, kept at the largest VmRSS until PID exits
  scripts/rss-pages.py report OUT.json [--binary PATH --objects LINKFILELIST]
                                               Rss per mapping and permission; with --binary, the
                                               binary's present KiB per section, and per Swift or C
                                               module for .text (symbols from `nm`, modules from the
                                               objects of SwiftPM's Objects.LinkFileList)

Run as root (or as the process's owner) on Linux. The module of a text page is the module whose
object defines the symbol at the page's middle; a symbol no object names takes the module of the
symbol before it (an object's code is contiguous in the link).
"""
import bisect
import collections
import json
import os
import re
import struct
import subprocess
import sys
import time


def status(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[key] = int(value.split()[0])
    return out


def snapshot(pid):
    smaps = open("/proc/%d/smaps" % pid).read()
    present = []
    with open("/proc/%d/pagemap" % pid, "rb") as pagemap:
        for line in open("/proc/%d/maps" % pid):
            parts = line.split()
            name = parts[5] if len(parts) > 5 else ""
            if not name.startswith("/"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            pagemap.seek(lo // 4096 * 8)
            raw = pagemap.read((hi - lo) // 4096 * 8)
            bits = "".join("1" if struct.unpack_from("<Q", raw, i * 8)[0] >> 63 else "0" for i in range(len(raw) // 8))
            present.append({"lo": lo, "hi": hi, "perm": parts[1], "off": int(parts[2], 16), "name": name, "present": bits})
    return {"smaps": smaps, "maps": present, "status": status(pid)}


def watch(pid, out):
    best = -1
    while True:
        try:
            rss = status(pid).get("VmRSS")
            if rss is None:
                break
            if rss > best + 64:
                snap = snapshot(pid)
                best = rss
                with open(out, "w") as f:
                    json.dump(snap, f)
        except (OSError, ProcessLookupError):
            break
        time.sleep(0.2)
    print("largest VmRSS seen: %d KiB, snapshot in %s" % (best, out))


def report(path, binary=None, objects=None):
    snap = json.load(open(path))
    rss = collections.defaultdict(collections.Counter)
    current = None
    for line in snap["smaps"].splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split()
            current = (parts[5].split("/")[-1] if len(parts) > 5 else "[anonymous]", parts[1])
        elif line.startswith("Rss:") and current:
            rss[current[0]][current[1]] += int(line.split()[1])
    print("status:", snap["status"])
    print("%9s  %s" % ("Rss KiB", "mapping (by permission)"))
    for name, perms in sorted(rss.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(perms.values())
        if total:
            print("%9d  %s  %s" % (total, name, dict(p for p in perms.items() if p[1])))
    if not binary:
        return
    sections = []
    for line in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", line)
        if m and int(m.group(2), 16):
            sections.append((int(m.group(2), 16), int(m.group(3), 16), m.group(1)))
    real = os.path.realpath(binary)
    maps = [m for m in snap["maps"] if os.path.realpath(m["name"]) == real or m["name"] == binary]
    base = min(m["lo"] - m["off"] for m in maps if m["off"] == 0)
    pages = {m["lo"] - base + i * 4096 for m in maps for i, bit in enumerate(m["present"]) if bit == "1"}

    def section_of(address):
        for start, size, name in sections:
            if start <= address < start + size:
                return name
        return "(between sections)"

    print("\nbinary: present KiB per section")
    for name, count in collections.Counter(section_of(p) for p in pages).most_common():
        print("%9d  %s" % (count * 4, name))
    if not objects:
        return
    symbol_module = {}
    for line in open(objects):
        obj = line.strip().strip("'")
        if not obj:
            continue
        module = os.path.basename(os.path.dirname(obj)).removesuffix(".build")
        if "BoringSSL" in obj or module in ("fipsmodule", "ssl", "x509", "crypto", "bcm", "evp", "asn1", "curve25519"):
            module = "C: BoringSSL (NIOSSL's and Crypto's)"
        listing = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True).stdout
        for entry in listing.splitlines():
            fields = entry.split()
            if len(fields) == 3 and fields[1] in "tTwW":
                symbol_module.setdefault(fields[2], module)
    symbols = []
    for entry in subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True).stdout.splitlines():
        fields = entry.split()
        if len(fields) == 3 and fields[1] in "tTwW":
            symbols.append((int(fields[0], 16), fields[2]))
    symbols.sort()
    modules, current = [], "?"
    for _, name in symbols:
        current = symbol_module.get(name, current)
        modules.append(current)
    addresses = [a for a, _ in symbols]
    text = next((s for s in sections if s[2] == ".text"), None)
    size = collections.Counter()
    for i in range(len(symbols) - 1):
        if text[0] <= symbols[i][0] < text[0] + text[1]:
            size[modules[i]] += symbols[i + 1][0] - symbols[i][0]
    present = collections.Counter()
    for page in pages:
        if text[0] <= page < text[0] + text[1]:
            i = bisect.bisect_right(addresses, page + 2048) - 1
            present[modules[i] if i >= 0 else "?"] += 4
    print("\n.text: present KiB / size KiB per module")
    for module, kib in present.most_common():
        print("%9d / %6d  %s" % (kib, size[module] // 1024, module))
    print("%9d / %6d  total" % (sum(present.values()), text[1] // 1024))


def main(argv):
    if len(argv) >= 3 and argv[0] in ("snap", "watch"):
        pid, out = int(argv[1]), argv[2]
        if argv[0] == "snap":
            with open(out, "w") as f:
                json.dump(snapshot(pid), f)
        else:
            watch(pid, out)
    elif len(argv) >= 2 and argv[0] == "report":
        options = dict(zip(argv[2::2], argv[3::2]))
        report(argv[1], options.get("--binary"), options.get("--objects"))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
