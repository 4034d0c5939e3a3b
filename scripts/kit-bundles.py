#!/usr/bin/env python3
"""Many bundles of one team against one bundle, measured from outside on the performance kit's
broker and sink, as the kit measures one bundle.

  scripts/kit-bundles.py BIN [--bundle-counts 1,40,1,40,1,40,1,40] [--jobs 40000] [--out DIR]

Starts the kit's broker and sink (../shared/perf/broker.sh, sink.sh; stopped at the end), then for
each count B: the product (BIN run) declares the topology of B bundles on an empty broker and is
stopped, jobs/B jobs per bundle are preloaded with the kit's preload.py, the product is started
again with every bundle under the one provider token (one team, so one pool of connections), and
the drain is timed from the broker's side: it starts when the queues hold fewer ready jobs than
were preloaded and ends when they hold no message (ready + unacked, the broker's prometheus
figures). CPU a job is the worker's CPU inside the drain over the jobs, as the kit's `us/job`;
the sink's (nghttpd) likewise. Prints a line a run and the medians per count, and appends JSON
lines to DIR/results.jsonl.

Environment: PERF_DIR (../shared/perf), PERF_PY (the kit's venv Python, which has pika).
"""
import argparse, json, os, re, signal, statistics, subprocess, sys, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
PERF = os.environ.get("PERF_DIR", os.path.join(HERE, "../../shared/perf"))
PY = os.environ.get("PERF_PY", "/tmp/apns-perf/venv/bin/python")
TMP = os.environ.get("PERF_TMP", "/tmp/apns-perf")
AMQP = "amqp://guest:guest@127.0.0.1:5800/%2f"
PROM = "http://127.0.0.1:15801/metrics/detailed?family=queue_coarse_metrics&vhost=%2F"

try:
    import pika
except ImportError:  # the kit's venv has it: run again under that Python
    os.execv(PY, [PY] + sys.argv)

# The kit's own readings of a process's CPU and peak RSS, so these figures are taken as its are.
sys.path.insert(0, os.path.join(PERF, "lib"))
from measure import proc_cpu, proc_hwm_kb  # noqa: E402


def bundles_of(count):
    return ["com.example.perf"] if count == 1 else ["com.example.perf.b%02d" % i for i in range(count)]


def write_config(path, bundles):
    certs = TMP + "/certs"
    with open(path, "w") as f:
        f.write("[amqp]\nurl = %s\n\n[retry]\ndelays = 10s, 1m, 5m, 15m, 15m\nmaxAttempts = 6\n\n" % AMQP)
        f.write("[admin]\nlisten = 127.0.0.1:8451\n")
        for b in bundles:
            f.write("\n[apns \"%s\"]\ntransport = http2\nenvironment = production\nteamId = PERFTEAM01\n"
                    "keyId = PERFKEY001\ntokenKeyFile = %s/AuthKey_PERFKEY001.p8\nhost = 127.0.0.1\n"
                    "port = 8450\ncaFile = %s/ca.pem\n" % (b, certs, certs))


class Queues:
    def __init__(self, bundles):
        params = pika.URLParameters(AMQP)
        params.heartbeat = 0
        self.conn = pika.BlockingConnection(params)
        self.ch = self.conn.channel()
        self.names = ["apns." + b for b in bundles]
        self.rx = re.compile(r'^rabbitmq_detailed_queue_messages\{vhost="/",queue="(apns\.[^"]+)"\} (\d+)', re.M)

    def ready_and_consumers(self):
        ready = consumers = 0
        for q in self.names:
            m = self.ch.queue_declare(q, passive=True).method
            ready += m.message_count
            consumers += 1 if m.consumer_count > 0 else 0
        return ready, consumers

    def total(self):
        with urllib.request.urlopen(PROM, timeout=5) as r:
            found = dict(self.rx.findall(r.read().decode()))
        # A queue the figures do not list yet counts as holding something.
        return sum(int(found.get(q, 1)) for q in self.names)

    def close(self):
        try:
            self.conn.close()
        except pika.exceptions.AMQPError:  # already closed by the broker
            pass


def product(bin_path, conf, log):
    env = {k: v for k, v in os.environ.items() if not k.startswith("APNS_WORKER_")}
    return subprocess.Popen([bin_path, "run", "--config", conf], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, start_new_session=True)


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=40)
    except ProcessLookupError:
        proc.wait()
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def all_consuming(bundles):
    """True when every bundle's queue exists and has a consumer. A passive declare of a queue
    not declared yet closes the channel, so each look uses a connection of its own."""
    try:
        q = Queues(bundles)
    except pika.exceptions.AMQPError:
        return False
    try:
        return q.ready_and_consumers()[1] == len(bundles)
    except pika.exceptions.AMQPError:
        return False
    finally:
        q.close()


def one_run(bin_path, count, jobs, out, index, sink_pid):
    bundles = bundles_of(count)
    conf = os.path.join(out, "run%02d-%d.conf" % (index, count))
    write_config(conf, bundles)
    args = sum((["--bundle", b] for b in bundles), [])
    subprocess.run([PY, PERF + "/preload.py", "--url", AMQP, "--fresh-all", "--topology", "none", "-n", "0"] + args,
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "run%02d-%d-declare.log" % (index, count)), "w") as log:
        declaring = product(bin_path, conf, log)
        deadline = time.monotonic() + 120
        while not all_consuming(bundles):
            if time.monotonic() > deadline or declaring.poll() is not None:
                stop(declaring)
                raise SystemExit("the product did not declare and consume all %d queues; see the declare log" % count)
            time.sleep(0.2)
        stop(declaring)
    per = jobs // count
    subprocess.run([PY, PERF + "/preload.py", "--url", AMQP, "-n", str(per), "--topology", "auto"] + args,
                   check=True, stdout=subprocess.DEVNULL)
    total = per * count
    time.sleep(3)
    q = Queues(bundles)
    log = open(os.path.join(out, "run%02d-%d.log" % (index, count)), "w")
    spawned = time.monotonic()
    proc = product(bin_path, conf, log)
    while q.ready_and_consumers()[0] >= total:
        if proc.poll() is not None:
            raise SystemExit("the product exited before consuming; see its log")
        time.sleep(0.01)
    start = time.monotonic()
    cpu0, sink0 = proc_cpu(proc.pid), proc_cpu(sink_pid)
    while q.ready_and_consumers()[0] > 0:
        time.sleep(0.02)
    while q.total() > 0:
        time.sleep(0.02)
    end = time.monotonic()
    cpu1, sink1 = proc_cpu(proc.pid), proc_cpu(sink_pid)
    peak = proc_hwm_kb(proc.pid)
    stop(proc)
    log.close()
    q.close()
    row = {
        "bundles": count, "jobs": total, "jobs_per_s": total / (end - start), "startup_s": start - spawned,
        "cpu_us_per_job": (cpu1 - cpu0) / total * 1e6, "sink_us_per_job": (sink1 - sink0) / total * 1e6,
        "peak_rss_mb": peak / 1000, "exit": proc.returncode,
    }
    print("%2d bundles: %6d jobs, %7.0f jobs/s, worker %5.1f µs a job, sink %4.1f µs a job, peak RSS %.1f MB, exit %s"
          % (count, total, row["jobs_per_s"], row["cpu_us_per_job"], row["sink_us_per_job"], row["peak_rss_mb"],
             proc.returncode), flush=True)
    with open(os.path.join(out, "results.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("--bundle-counts", default="1,40,1,40,1,40,1,40")
    ap.add_argument("--jobs", type=int, default=40000)
    ap.add_argument("--out", default=TMP + "/bundles-" + time.strftime("%Y%m%d-%H%M%S"))
    a = ap.parse_args()
    counts = [int(c) for c in a.bundle_counts.split(",")]
    os.makedirs(a.out, exist_ok=True)
    subprocess.run([PERF + "/broker.sh", "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        subprocess.run([PERF + "/sink.sh", "certs"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([PERF + "/sink.sh", "start"], check=True, stdout=subprocess.DEVNULL)
        sink_pid = int(subprocess.run([PERF + "/sink.sh", "pid"], check=True, capture_output=True, text=True).stdout)
        rows = [one_run(os.path.abspath(a.bin), c, a.jobs, a.out, i, sink_pid) for i, c in enumerate(counts)]
    finally:
        subprocess.run([PERF + "/sink.sh", "stop"], stdout=subprocess.DEVNULL)
        subprocess.run([PERF + "/broker.sh", "stop"], stdout=subprocess.DEVNULL)
    by = {}
    for r in rows:
        by.setdefault(r["bundles"], []).append(r)
    medians = {c: statistics.median(r["cpu_us_per_job"] for r in rs) for c, rs in by.items()}
    for c, rs in sorted(by.items()):
        print("median, %d bundles: %.0f jobs/s, worker %.1f µs a job, sink %.1f µs a job (%d runs)"
              % (c, statistics.median(r["jobs_per_s"] for r in rs), medians[c],
                 statistics.median(r["sink_us_per_job"] for r in rs), len(rs)))
    if 1 in medians:
        for c in sorted(medians):
            if c != 1:
                print("%d bundles cost %.2f × one bundle's CPU a job" % (c, medians[c] / medians[1]))
    print("results: " + a.out)


if __name__ == "__main__":
    main()
