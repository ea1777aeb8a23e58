"""The live terminal dashboard, drawn with Rich (pip install rich; the `tui` extra).

One metric's chart at a time (train and valid curves in Braille dots), a table of every
metric, progress bars with ETA, and the last messages. Keys (read by a small thread from the
terminal in cbreak mode, so Ctrl-C still sends SIGINT):

    left / right   previous / next metric
    up / down      full history / recent history (the last `recent` training batches)
    q              stop: like Ctrl-C, the learner finishes the step and writes a checkpoint

Rich redraws from its own thread a few times a second; the training loop only appends to
the history, so the dashboard costs the loop next to nothing.
"""

import os
import select
import sys
import threading

from . import Dashboard, format_seconds

__all__ = ["TuiDashboard", "parse_keys"]

_KEYS = {b"\x1b[A": "up", b"\x1b[B": "down", b"\x1b[C": "right", b"\x1b[D": "left",
         b"\x1bOA": "up", b"\x1bOB": "down", b"\x1bOC": "right", b"\x1bOD": "left",
         b"q": "q", b"Q": "q", b"h": "left", b"l": "right", b"k": "up", b"j": "down"}


def parse_keys(data):
    """Key names in a chunk of terminal input (arrow escape sequences, q, h/j/k/l)."""
    keys, i = [], 0
    while i < len(data):
        for seq in (data[i:i + 3], data[i:i + 1]):
            if seq in _KEYS:
                keys.append(_KEYS[seq])
                i += len(seq)
                break
        else:
            i += 1
    return keys


class TuiDashboard(Dashboard):
    """See the module docstring. `console`: a rich Console (tests pass one that records);
    `keys=False`: don't read the terminal (tests call `press(key)`)."""

    def __init__(self, console=None, keys=True, recent=200, refresh_per_second=4):
        try:
            import rich  # noqa: F401
        except ImportError:
            raise ImportError("the tui dashboard needs Rich: pip install rich (or ember[tui]); "
                              "--dashboard plain works without it") from None
        self.console, self.read_keys, self.recent = console, keys, recent
        self.refresh_per_second = refresh_per_second
        self.metric_index, self.full_history = 0, False
        self.stop_requested = False
        self.messages = []
        self._learner, self._live, self._reader = None, None, None
        self._closing = threading.Event()
        self._term = None
        self._lock = threading.Lock()

    # ---- keys ------------------------------------------------------------------------------
    def press(self, key):
        """Act on a key name: left, right, up, down, q."""
        names = self._names()
        with self._lock:
            if key == "left" and names:
                self.metric_index = (self.metric_index - 1) % len(names)
            elif key == "right" and names:
                self.metric_index = (self.metric_index + 1) % len(names)
            elif key == "up":
                self.full_history = True
            elif key == "down":
                self.full_history = False
            elif key == "q":
                self.stop_requested = True  # the learner announces it
        self._refresh()

    def _start_keys(self):
        if not self.read_keys:
            return
        try:
            import termios
            import tty
            fd = sys.stdin.fileno()
            if not os.isatty(fd):
                return
            self._term = (fd, termios.tcgetattr(fd))
            tty.setcbreak(fd)
        except (ImportError, OSError, ValueError, AttributeError):
            self._term = None
            return

        def read():
            fd = self._term[0]
            while not self._closing.is_set():
                try:
                    ready, _, _ = select.select([fd], [], [], 0.1)
                    if ready:
                        data = os.read(fd, 64)
                        if not data:
                            return
                        for key in parse_keys(data):
                            self.press(key)
                except (OSError, ValueError):
                    return
        self._reader = threading.Thread(target=read, name="ember-tui-keys", daemon=True)
        self._reader.start()

    def _stop_keys(self):
        self._closing.set()
        if self._reader is not None:
            self._reader.join(timeout=1)
        if self._term is not None:
            import termios
            fd, attrs = self._term
            try:
                termios.tcsetattr(fd, termios.TCSADRAIN, attrs)
            except (OSError, termios.error):
                pass
            self._term = None

    # ---- the dashboard protocol ----------------------------------------------------------------
    def start(self, learner):
        from rich.console import Console
        from rich.live import Live
        self._learner = learner
        if self.console is None:
            self.console = Console()
        self._live = Live(console=self.console, screen=self.console.is_terminal,
                          auto_refresh=self.console.is_terminal,
                          refresh_per_second=self.refresh_per_second,
                          get_renderable=self.render, redirect_stdout=False,
                          redirect_stderr=False, transient=False)
        self._live.start()
        self._start_keys()

    def epoch_end(self, epoch, summary, seconds):
        parts = [f"epoch {epoch + 1} done ({format_seconds(seconds)})"]
        for split in ("train", "valid"):
            if split in summary:
                parts.append(f"{split}: " + "  ".join(
                    f"{name} {self._fmt(name, v)}" for name, v in summary[split].items()
                    if v is not None))
        self.message("  |  ".join(parts))

    def message(self, text):
        with self._lock:
            self.messages.append(text)
            del self.messages[:-50]
        self._refresh()

    def close(self):
        self._stop_keys()
        if self._live is not None:
            self._refresh()
            self._live.stop()
            self._live = None
        for text in self.messages[-8:]:  # what stays on the screen after the dashboard
            self.console.print(text, markup=False, highlight=False)

    def _refresh(self):
        live = self._live
        if live is not None:
            try:
                live.refresh()
            except Exception:  # a refresh racing the close must not raise in a key thread
                pass

    # ---- drawing ---------------------------------------------------------------------------
    def _names(self):
        learner = self._learner
        if learner is None:
            return []
        return [m.name for m in learner.metric_types]

    def _metric(self, name):
        for m in self._learner.metric_types:
            if m.name == name:
                return m
        return None

    def _fmt(self, name, value):
        m = self._metric(name) if self._learner else None
        return m.format(value) if m else f"{value:.4g}"

    def current(self):
        """(metric name, "full" | "recent") being shown."""
        names = self._names()
        name = names[self.metric_index % len(names)] if names else "Loss"
        return name, "full" if self.full_history else "recent"

    def render(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text
        learner = self._learner
        width = self.console.size.width
        height = self.console.size.height
        name, mode = self.current()
        tabs = Text()
        for n in self._names():
            tabs.append(f" {n} ", style="bold reverse" if n == name else "dim")
            tabs.append(" ")
        header = Text.assemble((f" {learner.title} ", "bold"),
                               ("  ←/→ metric  ↑/↓ full/recent history  q stop", "dim"))

        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 1))
        table.add_column("metric")
        table.add_column("train", justify="right")
        table.add_column("last valid", justify="right")
        for m in learner.metric_types:
            t = next((x for x in learner.metrics["train"] if x.name == m.name), None)
            v = learner.history.epoch_values(m.name, "valid")
            tv = t.value() if t is not None else None
            vv = v[max(v)] if v else None
            table.add_row(m.name, m.format(tv) if tv is not None else "-",
                          m.format(vv) if vv is not None else "-",
                          style="bold" if m.name == name else None)

        chart_w = max(width - 40, 20)
        chart_h = max(height - 16, 5)
        chart = self._chart(name, mode, chart_w - 16, chart_h)
        body = Table.grid(padding=(0, 1))
        body.add_column(width=chart_w)
        body.add_column()
        body.add_row(Panel(chart, title=f"{name} — {mode} history", border_style="cyan",
                           height=chart_h + 4),
                     Panel(table, title="metrics", border_style="dim"))
        return Group(header, tabs, body, self._progress_panel(width),
                     Text("\n".join(self.messages[-3:]), style="yellow"))

    def _chart(self, name, mode, width, height):
        from rich.text import Text

        from ..plot import braille_chart
        h = self._learner.history
        tx, ty = h.series(name, "train")
        vx, vy = h.series(name, "valid")
        n = min(len(tx), len(ty))
        tx, ty = tx[:n], ty[:n]
        n = min(len(vx), len(vy))
        vx, vy = vx[:n], vy[:n]
        xlim = None
        if mode == "recent" and len(tx) > self.recent:
            lo = tx[-self.recent]
            keep = vx >= lo
            tx, ty, vx, vy = tx[-self.recent:], ty[-self.recent:], vx[keep], vy[keep]
        if not len(tx) and not len(vx):
            return Text("waiting for the first batch...", style="dim")
        if len(tx) or len(vx):
            xs = [a for a in (tx, vx) if len(a)]
            lo, hi = min(float(a.min()) for a in xs), max(float(a.max()) for a in xs)
            xlim = (lo, hi if hi > lo else lo + 1e-9)
        rows, tags, (xlo, xhi), (ylo, yhi) = braille_chart(
            [(tx, ty, "train"), (vx, vy, "valid")], width, height, xlim=xlim)
        metric = self._metric(name)
        out = Text()
        styles = {"train": "bright_blue", "valid": "dark_orange", None: ""}
        for r, (row, tag_row) in enumerate(zip(rows, tags)):
            label = ""
            if r == 0:
                label = metric.format(yhi) if metric else f"{yhi:.3g}"
            elif r == len(rows) - 1:
                label = metric.format(ylo) if metric else f"{ylo:.3g}"
            out.append(f"{label:>10} ", style="dim")
            for ch, tag in zip(row, tag_row):
                out.append(ch, style=styles[tag])
            out.append("\n")
        out.append(" " * 11 + f"epoch {xlo:.2f}".ljust(width - 10) + f"{xhi:.2f}", style="dim")
        out.append("\n" + " " * 11)
        out.append("━━ train", style="bright_blue")
        out.append("   ")
        out.append("━━ valid", style="dark_orange")
        return out

    def _progress_panel(self, width):
        from rich.panel import Panel
        from rich.text import Text
        p = self._learner.progress()
        epochs = p["epochs"] or 1
        bar_w = max(width - 60, 10)

        def bar(frac):
            frac = min(max(frac, 0.0), 1.0)
            full = int(round(frac * bar_w))
            return "█" * full + "░" * (bar_w - full)
        batches = p["batches"] or 0
        frac = p["batch"] / batches if batches else 0.0
        train_n = p["train_batches"] or 0
        valid_n = p["valid_batches"] or 0
        per_epoch = train_n + valid_n
        done_in_epoch = (min(p["batch"], train_n) if p["split"] == "train"
                         else train_n + p["batch"])
        total = ((p["epoch"] * per_epoch + done_in_epoch) / (epochs * per_epoch)
                 if per_epoch else 0.0)
        text = Text()
        text.append(f"epoch {min(p['epoch'] + 1, epochs)}/{epochs} {p['split']:<5} ")
        text.append(bar(frac), style="green")
        text.append(f" {p['batch']}/{batches}  ETA {format_seconds(p['eta_epoch'])}\n")
        text.append(f"{'total':<17} ")
        text.append(bar(total), style="cyan")
        text.append(f" {total * 100:5.1f}%  elapsed {format_seconds(p['elapsed'])}  "
                    f"ETA {format_seconds(p['eta_total'])}")
        return Panel(text, title="progress", border_style="green")

    def snapshot(self):
        """The dashboard as plain text (for tests and logs)."""
        from rich.console import Console
        console = Console(width=self.console.size.width, height=self.console.size.height,
                          record=True, file=open(os.devnull, "w"), color_system=None)
        console.print(self.render())
        text = console.export_text()
        console.file.close()
        return text
