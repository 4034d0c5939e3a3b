#!/usr/bin/env python3
"""One run of the performance kit's product slot, outside the kit, sampling resident memory.

  scripts/rss-drain.py BIN LABEL [--n 50000] [--env K=V ...] [--snap] [--out DIR]

As ../shared/perf/bench.sh runs the product: a declare run on an empty broker, N jobs preloaded
with the kit's preload.py, `BIN run --config $RSS_CONF` started, SIGTERM once the queue holds no
message (management API), VmHWM read every 0.1 s until exit. Prints one JSON line (peak, heap and
file peaks, CPU per job up to the empty queue) and appends it to DIR/results.jsonl. With --snap,
saves scripts/rss-pages.py snapshots at the start-up's end (consumer registered) and at the
largest RSS seen (DIR/LABEL-start.json, -peak.json).

Environment: RSS_AMQP_URL, RSS_MGMT_URL (the broker of scripts/broker.sh), RSS_CONF (the kit's
product configuration pointed at that broker and a sink: `apns-worker simulator`), PERF_DIR
(../shared/perf), PERF_PY (the kit's venv Python).
"""
import argparse, json, os, signal, subprocess, sys, time, struct, urllib.request, base64

PERF = os.environ.get("PERF_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../shared/perf"))
PY = os.environ.get("PERF_PY", "/tmp/apns-perf/venv/bin/python")
URL = os.environ.get("RSS_AMQP_URL", "amqp://guest:guest@127.0.0.1:5682/%2f")
MGMT = os.environ.get("RSS_MGMT_URL", "http://127.0.0.1:15682")
Q = "apns.com.example.perf"
CONF = os.environ.get("RSS_CONF", "apns-worker.conf")

def status(pid):
    d = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                    d[k] = int(v.split()[0])
    except OSError:
        pass
    return d

def mgmt_total():
    req = urllib.request.Request(MGMT + "/api/queues/%2f/" + Q)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    with urllib.request.urlopen(req, timeout=5) as r:
        j = json.loads(r.read())
    return j.get("messages_ready", 0), j.get("messages_unacknowledged", 0), j.get("consumers", 0)

def snapshot(pid, path):
    """smaps + per-file-mapping present bitmaps (pagemap bit 63)."""
    smaps = open("/proc/%d/smaps" % pid).read()
    maps = []
    for line in open("/proc/%d/maps" % pid):
        parts = line.split()
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        name = parts[5] if len(parts) > 5 else ""
        maps.append((lo, hi, parts[1], int(parts[2], 16), name))
    present = []
    with open("/proc/%d/pagemap" % pid, "rb") as pm:
        for lo, hi, perm, off, name in maps:
            if not name.startswith("/"):
                continue
            pm.seek(lo // 4096 * 8)
            raw = pm.read((hi - lo) // 4096 * 8)
            bits = [1 if (struct.unpack_from("<Q", raw, i * 8)[0] >> 63) & 1 else 0 for i in range(len(raw) // 8)]
            present.append({"lo": lo, "hi": hi, "perm": perm, "off": off, "name": name,
                            "present": "".join(map(str, bits))})
    with open(path, "w") as f:
        json.dump({"smaps": smaps, "maps": present, "status": status(pid)}, f)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("label")
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--snap", action="store_true")
    ap.add_argument("--out", default="/tmp/rss-drain")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("APNS_WORKER_")}
    for kv in a.env:
        k, _, v = kv.partition("=")
        env[k] = v
    cmd = [a.bin, "run", "--config", CONF]
    # declare
    subprocess.run([PY, PERF + "/preload.py", "--url", URL, "--mgmt", MGMT, "--bundle", "com.example.perf",
                    "--fresh-all", "--topology", "none", "-n", "0"], check=True, stdout=subprocess.DEVNULL)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(a.out + "/declare.log", "wb"), start_new_session=True)
    subprocess.run([PY, PERF + "/lib/qstat.py", "--amqp", URL, "--wait-consumer", "60", Q], check=True, stdout=subprocess.DEVNULL)
    p.send_signal(signal.SIGTERM); p.wait(60)
    subprocess.run([PY, PERF + "/preload.py", "--url", URL, "--mgmt", MGMT, "--bundle", "com.example.perf",
                    "-n", str(a.n), "--topology", "auto"], check=True, stdout=subprocess.DEVNULL)
    time.sleep(1)
    log = open("%s/%s.log" % (a.out, a.label), "wb")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    pid = p.pid
    hwm = 0; hwm_before_term = None; cpu_at_done = None; seen_jobs = False
    max_rss = 0; snapped_start = False; last_snap_rss = 0
    start_rss = None; drain_start = None
    samples = []
    done_at = None
    while True:
        s = status(pid)
        if not s or "VmRSS" not in s or p.poll() is not None:
            break
        now = time.monotonic() - t0
        samples.append((round(now, 2), s.get("VmRSS", 0), s.get("RssAnon", 0), s.get("RssFile", 0)))
        hwm = max(hwm, s.get("VmHWM", 0))
        if s.get("VmRSS", 0) > max_rss:
            max_rss = s["VmRSS"]
            if a.snap and snapped_start and max_rss - last_snap_rss >= 128:
                snapshot(pid, "%s/%s-peak.json" % (a.out, a.label)); last_snap_rss = max_rss
        if done_at is None:
            try:
                ready, unacked, consumers = mgmt_total()
            except Exception:
                ready, unacked, consumers = None, None, 0
            if consumers and not snapped_start:
                start_rss = s.get("VmRSS")
                if a.snap:
                    snapshot(pid, "%s/%s-start.json" % (a.out, a.label))
                snapped_start = True
            if ready:
                seen_jobs = True
            if ready is not None and drain_start is None and seen_jobs and ready < a.n:
                drain_start = now
            if ready == 0 and unacked == 0 and drain_start is not None:
                done_at = now
                hwm_before_term = s.get("VmHWM")
                try:
                    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
                    cpu_at_done = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
                except Exception:
                    cpu_at_done = None
                p.send_signal(signal.SIGTERM)
        time.sleep(0.1)
        if now > 600:
            p.kill()
    p.wait()
    res = {"label": a.label, "env": a.env, "start_rss_kb": start_rss, "max_sampled_rss_kb": max_rss,
           "hwm_kb": hwm, "hwm_before_term_kb": hwm_before_term,
           "cpu_s": cpu_at_done, "cpu_us_per_job": cpu_at_done * 1e6 / a.n if cpu_at_done else None, "drain_s": (done_at - drain_start) if done_at and drain_start else None, "rc": p.returncode}
    res["peak_anon_kb"] = max(x[2] for x in samples); res["peak_file_kb"] = max(x[3] for x in samples)
    print(json.dumps(res))
    json.dump(samples, open("%s/%s-samples.json" % (a.out, a.label), "w"))
    with open(a.out + "/results.jsonl", "a") as f:
        f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
