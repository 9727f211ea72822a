"""bench/bench_grid.py - a goblin grid against Dask distributed on the same chunked product.

    python3 bench/bench_grid.py

goblin: a node (in build/bench/bench_grid --procs N) + 2 goblin-worker processes
with 1 thread each over tcp loopback, every tile verified with Freivalds. Dask: a
LocalCluster of 2 worker processes x 1 thread, the inputs starting as NumPy arrays in
this process, chunked exactly like goblin's plan (A in tile_rows x tile_k blocks, B in
tile_k x tile_cols blocks), result gathered back as one NumPy array. Each time is the
best of GOBLIN_BENCH_GRID_REPS (default 4 here) runs after a warm-up, the two
sides alternating. goblin keeps its node and workers up between runs (idle, they use
under 1% of a core). Dask's cluster does not stay up during goblin's runs: an idle
LocalCluster with its client uses about 10% of a core, which would be charged to
goblin's time (both idle figures are measured and printed). Each Dask run therefore gets a fresh
cluster, warmed up with one untimed run of the same product, and is closed before
goblin's run; goblin's run starts once the cluster's processes have exited (their
teardown, freeing a few GB, used to overlap goblin's job). goblin's node and workers
stay up, as a running service would, and are warmed up with two jobs (the first jobs
after workers join also grow their panel caches and message buffers). Goal: goblin >= 1.6x faster. Markdown on stdout, progress on stderr.

Environment: GOBLIN_BENCH_GRID_N (default 4096), GOBLIN_BENCH_GRID_BIN (the C program;
default build/bench/bench_grid next to GOBLIN_LIB's build directory),
GOBLIN_BENCH_THREADS (printed; this comparison always uses 2 workers x 1 thread).

    python3 bench/bench_grid.py --client

what a user sees: goblin.connect("tcp://127.0.0.1:PORT") from this process to a
goblin-node process (--open, loopback) with 2 goblin-worker processes (1 thread each),
c = grid.matmul(a, b) on two N x N f32 NumPy arrays (a new result array each call, every
tile verified with Freivalds), against NumPy's a @ b with 2 threads and direct BLIS
(bli_sgemm_ex, 2 threads, in build/bench/bench_grid --blis N) on the same machine, the
three interleaved, best of GOBLIN_BENCH_GRID_REPS (default 3) after a warm-up, at
GOBLIN_BENCH_GRID_CLIENT_N (default "4096,8192"). Goal: goblin >= 0.85x of both.
Tools from GOBLIN_BENCH_GRID_TOOLS (default build/tools next to the C program).
"""

import os
import subprocess
import sys
import time

N = int(os.environ.get("GOBLIN_BENCH_GRID_N", "4096"))
REPS = int(os.environ.get("GOBLIN_BENCH_GRID_REPS", "4"))


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def find_bin():
    b = os.environ.get("GOBLIN_BENCH_GRID_BIN")
    if b:
        return b
    lib = os.environ.get("GOBLIN_LIB")
    if lib:
        cand = os.path.join(os.path.dirname(os.path.dirname(lib)), "bench", "bench_grid")
        if os.path.exists(cand):
            return cand
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(top, "build", "bench", "bench_grid")


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def idle_cpu_share(pid=None, seconds=2.0):
    """CPU share of a core that process @p pid (default: this one) and its children use
    over @p seconds, or None without psutil."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        me = psutil.Process(pid)
        procs = [me] + me.children(recursive=True)
    except psutil.Error:
        return None

    def cpu(p):
        try:
            t = p.cpu_times()
            return t.user + t.system
        except psutil.Error:
            return 0.0

    t0 = {p.pid: cpu(p) for p in procs}
    time.sleep(seconds)
    return sum(cpu(p) - t0[p.pid] for p in procs) / seconds


def wait_children_gone(keep, timeout=10.0):
    """Wait until this process has no child processes but @p keep (the Dask cluster's
    worker and nanny processes exiting), then a moment for the system to settle."""
    try:
        import psutil
    except ImportError:
        time.sleep(1.0)
        return
    t0 = time.perf_counter()
    me = psutil.Process()
    while time.perf_counter() - t0 < timeout:
        try:
            left = [c for c in me.children(recursive=True) if c.pid != keep and c.ppid() != keep]
        except psutil.Error:
            left = []
        left = [c for c in left if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        time.sleep(0.05)
    time.sleep(0.3)


def client_mode():
    """--client: Python client -> goblin-node process + 2 worker processes (see the top)."""
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[v] = "2"  # NumPy's a @ b with 2 threads, as many as the grid's workers
    import socket
    import tempfile
    import numpy as np
    import goblin
    reps = int(os.environ.get("GOBLIN_BENCH_GRID_REPS", "3"))
    sizes = [int(x) for x in os.environ.get("GOBLIN_BENCH_GRID_CLIENT_N", "4096,8192").split(",") if x]
    bin_ = find_bin()
    tools = os.environ.get("GOBLIN_BENCH_GRID_TOOLS") or os.path.join(os.path.dirname(os.path.dirname(bin_)),
                                                                      "tools")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"tcp://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="goblin-bench-client-")
    wenv = dict(os.environ, BLIS_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = [subprocess.Popen([os.path.join(tools, "goblin-node"), "--listen", url, "--open", "--data-dir", tmp],
                              stderr=open(os.path.join(tmp, "node.log"), "w"))]
    print(f"Python client (goblin.connect(\"{url}\"), this process) -> goblin-node process + 2 goblin-worker "
          f"processes (1 thread each), tcp loopback, every tile verified with Freivalds; c = grid.matmul(a, b) "
          f"(a new array each call) against NumPy a @ b (2 threads, {np.__version__}) and direct BLIS "
          f"(bli_sgemm_ex, 2 threads); best of {reps} interleaved runs after a warm-up. Ratio = other time / "
          f"goblin time (goal >= 0.85). Load average at start: {loadavg()}.\n")
    print("| n | goblin (client -> node process) | NumPy a @ b | direct BLIS | **vs NumPy** | **vs BLIS** | notes |")
    print("|---|---|---|---|---|---|---|")
    try:
        time.sleep(0.5)
        for i in range(2):
            procs.append(subprocess.Popen([os.path.join(tools, "goblin-worker"), "--connect", url, "--threads", "1",
                                           "--config-dir", os.path.join(tmp, f"w{i}")], env=wenv,
                                          stderr=open(os.path.join(tmp, f"w{i}.log"), "w")))
        t0 = time.perf_counter()
        grid = None
        while grid is None:
            try:
                grid = goblin.connect(url, connect_timeout=2.0)
            except goblin.GoblinError:
                if time.perf_counter() - t0 > 20:
                    raise
                time.sleep(0.2)
        while grid.stats()["workers_connected"] < 2:
            if time.perf_counter() - t0 > 30:
                raise RuntimeError("the workers did not connect")
            time.sleep(0.1)
        rng = np.random.default_rng(1)
        for n in sizes:
            blis = subprocess.Popen([bin_, "--blis", str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, bufsize=1)
            if blis.stdout.readline().strip() != "ready":
                raise RuntimeError(f"{bin_} --blis failed")
            a = rng.random((n, n), dtype=np.float32) - 0.5
            b = rng.random((n, n), dtype=np.float32) - 0.5
            tg, tn, tb = [], [], []
            c = ref = None
            for rep in range(reps + 1):  # rep 0 warms all three up
                log(f"client mode: n={n} rep {rep}")
                c = None
                t = time.perf_counter()
                c = grid.matmul(a, b, progress=False)
                tg.append(time.perf_counter() - t)
                ref = None
                t = time.perf_counter()
                ref = a @ b
                tn.append(time.perf_counter() - t)
                blis.stdin.write("run\n")
                tb.append(float(blis.stdout.readline()))
            blis.stdin.close()
            blis.wait()
            g_, n_, b_ = min(tg[1:]), min(tn[1:]), min(tb[1:])
            err = float(np.max(np.abs(c - ref)) / np.max(np.abs(ref)))
            print(f"| {n} | {g_:.3f} s | {n_:.3f} s | {b_:.3f} s | **{n_ / g_:.2f}x** | **{b_ / g_:.2f}x** | "
                  f"max rel err vs NumPy {err:.1e}; goblin runs {' '.join(f'{x:.2f}' for x in tg[1:])} s |",
                  flush=True)
            del a, b, c, ref
        st = grid.stats()
        grid.close()
        print(f"\nNode counters: {st['results_accepted']} tiles accepted, {st['results_rejected']} rejected. "
              f"Load average at end: {loadavg()}.")
    finally:
        for p in procs[1:]:
            p.terminate()
        procs[0].terminate()
        for p in procs:
            p.wait()
    return 0


def main():
    if "--client" in sys.argv[1:]:
        return client_mode()
    # One BLAS thread per Dask worker, set before NumPy loads so the worker processes
    # (which inherit the environment) do the same.
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
        os.environ[v] = "1"
    import numpy as np

    print(f"Same chunked f32 product C = A B, n = {N}, on 2 workers x 1 thread; best of {REPS} runs after a "
          f"warm-up. GOBLIN_BENCH_THREADS={os.environ.get('GOBLIN_BENCH_THREADS', '?')} (not used: the "
          f"comparison is fixed at 2 x 1). Load average at start: {loadavg()}.\n")
    try:
        import dask
        import dask.array as da
        from dask.distributed import Client, LocalCluster
    except ImportError as e:
        print(f"Dask is not installed ({e}): `python3 -m pip install dask distributed` failed or was not run, "
              f"so there is nothing to compare with.")
        return 0
    import warnings
    warnings.filterwarnings("ignore", message="Sending large graph")
    warnings.filterwarnings("ignore", message=".*[Pp]ort.*already in use")

    bin_ = find_bin()
    log(f"goblin: {bin_} --procs {N} serve")
    try:
        proc = subprocess.Popen([bin_, "--procs", str(N), "serve"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
    except OSError as e:
        print(f"goblin side failed to start ({bin_}): {e}")
        return 1

    def goblin_line():
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{bin_} --procs ended early (exit {proc.wait()})")
        return line.split()

    rng = np.random.default_rng(1)
    a = (rng.random((N, N), dtype=np.float32) - 0.5)
    b = (rng.random((N, N), dtype=np.float32) - 0.5)
    try:
        tr, tc, tk, tasks = (int(v) for v in goblin_line())  # after goblin's warm-up job
        best = float("inf")
        t_goblin = float("inf")
        out = None
        idle = None
        idle_goblin = idle_cpu_share(proc.pid)  # node + workers waiting for the next job
        for rep in range(REPS + 1):  # rep 0 warms both sides up
            log(f"dask: starting LocalCluster(2 x 1), rep {rep}")
            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                              silence_logs=40) as cluster, Client(cluster):
                for timed in (False, True):  # an untimed run in this cluster first
                    t0 = time.perf_counter()
                    x = da.from_array(a, chunks=(tr, tk))
                    y = da.from_array(b, chunks=(tk, tc))
                    out = (x @ y).compute()
                    t = time.perf_counter() - t0
                if rep > 0:
                    best = min(best, t)
                if rep == 1:
                    idle = idle_cpu_share()
            if rep > 0:
                wait_children_gone(proc.pid)
                proc.stdin.write("run\n")
                tg = float(goblin_line()[0])
                if tg < 0:
                    raise RuntimeError("goblin job failed")
                t_goblin = min(t_goblin, tg)
                log(f"rep {rep}: dask {t:.3f} s, goblin {tg:.3f} s")
        ref = a @ b
        err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
    except RuntimeError as e:
        print(f"goblin side failed: {e}")
        proc.kill()
        return 1
    finally:
        if proc.stdin:
            proc.stdin.close()
        proc.wait()
    print("| n | chunks (rows x cols x k) | tasks | goblin node + 2 workers (tcp, Freivalds) | Dask distributed "
          "| goblin speed-up (Dask / goblin) |")
    print("|---|---|---|---|---|---|")
    print(f"| {N} | {tr} x {tc} x {tk} | {tasks} | {t_goblin:.3f} s | {best:.3f} s | **{best / t_goblin:.2f}x** |")
    def pct(x):
        return f"{x * 100:.1f}% of a core" if x is not None else "not measured (psutil missing)"

    print(f"\nDask {dask.__version__}; Dask result max rel err vs NumPy {err:.1e}. Idle, over 2 s: the Dask "
          f"cluster with its client (this process included) used {pct(idle)}, so it is closed during goblin's "
          f"runs; goblin's node and workers used {pct(idle_goblin)} and stay up during Dask's runs. "
          f"Load average at end: {loadavg()}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
