"""Progress displays for grid jobs: tqdm (terminal, or a notebook widget with ipywidgets:
pip install 'goblin[progress]') when installed, a plain line on stderr otherwise, or the
user's callable progress(done, total).

The extension calls back whenever the count of accepted tasks changes (it polls the job
every 50 ms). The node reports whole tasks only, so a job of few tasks moves in steps
of 1/tasks; between steps a ticker thread redraws the display every TICK_S seconds, so
the elapsed time keeps moving. The last line stays on screen with the total time: a
job that ran for under DELAY_S seconds shows nothing at all.
"""
import sys
import threading
import time

DELAY_S = 0.5   # jobs shorter than this show nothing
TICK_S = 1.0    # the display is redrawn at least this often while a job runs
LOG_EVERY_S = 10.0  # not a terminal (a log file): one line per 10 s at most, plus the last


def format_seconds(s):
    """'0.4 s', '12.3 s', '2 min 05 s', '1 h 02 min'."""
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m} min {sec:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


class Progress:
    """One job's display. `callback` is what the extension calls (None: no display);
    close() writes the final line."""

    def __init__(self, progress, desc, stream=None):
        self.fn = None
        self.bar = None
        self.desc = desc
        self.stream = stream
        self.t0 = time.monotonic()
        self.done = 0
        self.total = 0
        self.printed = False
        self.last_print = 0.0
        self.plain = False
        self.width = 0
        self._lock = threading.Lock()
        self._stop = None
        self._thread = None
        if callable(progress):
            self.fn = progress
            return
        if not progress:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None:
            kw = dict(total=0, desc=desc, unit="task", leave=True, file=self._out())
            try:
                self.bar = tqdm(delay=DELAY_S, **kw)
            except TypeError:  # tqdm older than 4.60: no delay
                self.bar = tqdm(**kw)
        self.plain = self.bar is None
        self.fn = self._update
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ticker, name="goblin-progress", daemon=True)
        self._thread.start()

    @property
    def callback(self):
        return self.fn

    def _out(self):
        return self.stream if self.stream is not None else sys.stderr

    def _tty(self):
        return getattr(self._out(), "isatty", lambda: False)()

    def _update(self, done, total):
        with self._lock:
            self.done, self.total = done, total
            if self.bar is not None:
                if self.bar.total != total:
                    self.bar.total = total
                if done > self.bar.n:
                    self.bar.update(done - self.bar.n)  # respects tqdm's delay and refresh interval
            else:
                self._plain(time.monotonic())

    def _ticker(self):
        while not self._stop.wait(TICK_S):
            with self._lock:
                if self._stop.is_set():
                    return
                now = time.monotonic()
                if self.bar is not None:
                    if now - self.t0 >= DELAY_S:
                        self.bar.refresh()
                else:
                    self._plain(now)

    def line(self, now, final=False):
        pct = 100.0 * self.done / self.total if self.total else 0.0
        head = f"{self.desc}: {self.done}/{self.total} tasks ({pct:.0f}%)"
        took = format_seconds(now - self.t0)
        if not final:
            return f"{head}, {took}"
        if self.total and self.done >= self.total:
            return f"{head} in {took}"
        return f"{head}, stopped after {took}"

    def _plain(self, now):
        if now - self.t0 < DELAY_S:
            return
        tty = self._tty()
        if not tty and now - self.last_print < LOG_EVERY_S:
            return
        if tty and now - self.last_print < 0.25:
            return
        self.last_print = now
        self._write(self.line(now), tty, end="" if tty else "\n")
        self.printed = True

    def _write(self, text, tty, end):
        """A line; on a terminal over the previous one (padded to erase its tail)."""
        out = self._out()
        if tty and self.printed:
            out.write("\r" + text.ljust(self.width))
        else:
            out.write(text)
        self.width = len(text)
        out.write(end)
        out.flush()

    def close(self):
        """Stop the ticker; leave the final line (with the elapsed time) on screen."""
        if self._stop is not None:
            self._stop.set()
        with self._lock:
            if self.bar is not None:
                self.bar.close()  # leave=True: the bar stays, with its elapsed time
                return
            if not self.plain:
                return
            now = time.monotonic()
            if not self.printed and now - self.t0 < DELAY_S:
                return
            self._write(self.line(now, final=True), self._tty(), end="\n")
