"""Open the built site in headless Chromium at a desktop and a phone width and measure what a reader gets.

    python scripts/check_pages.py                       # build the site (mkdocs build --strict), measure, print
    python scripts/check_pages.py --out docs/results/pages-check.md --shots /tmp/shots

For every page and every width (1366 and 390 CSS px wide by default) it records:
- whether the page scrolls sideways (the document's scrollWidth against its clientWidth);
- each timeline picture: its natural width, the width it is drawn at, how much of it the figure shows without
  scrolling, the size of its axis text as drawn, and whether it links to the full-size image;
- every request the page made to another host than the local server (there must be none), failed ones included.

It needs the `chromium` command (Debian's package) and nothing else beyond the workbook's own requirements. The
site is served by a local HTTP server; Chromium is driven over the DevTools protocol on a pair of pipes, each page
in a fresh tab given the width's viewport (a phone's below 800 px), and measured by a script run in the page.
Exit status: 0 when every page passed (no sideways scroll, no outside request, timelines linked and legible), 1
when one did not, 2 when it could not measure (no chromium, the build failed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import http.server
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTHS = (1366, 390)  # CSS px wide: a common laptop and a common phone (each 900 px tall, a phone 844)
# The timelines are drawn by checker/trace/timeline.py with matplotlib's default 10 pt tick labels at 120 dpi:
# 16.7 px in the image. Drawn at `scale` of their natural width, the text is 16.7 * scale px tall.
TICK_TEXT_PX = 10 / 72 * 120
LEGIBLE_PX = 9.0  # the smallest axis text counted as legible
DESKTOP = 1024  # from this width on, a timeline must be seen whole, without scrolling it

MEASURE = r"""
(() => {
  const doc = document.documentElement;
  const figures = [...document.querySelectorAll("figure.timeline")].map(f => {
    const img = f.querySelector("img");
    const link = img && img.closest("a");
    return {
      src: img ? img.getAttribute("src") : null,
      natural: img ? img.naturalWidth : 0,
      drawn: img ? Math.round(img.getBoundingClientRect().width) : 0,
      shown: Math.round(f.clientWidth),
      link: link ? link.getAttribute("href") : null,
    };
  });
  const wide = [...document.querySelectorAll("body *")]
    .filter(e => e.getBoundingClientRect().right > doc.clientWidth + 1)
    .filter(e => !e.parentElement.closest("pre, figure.timeline, .md-typeset__scrollwrap, .md-sidebar, .md-search"))
    .map(e => e.tagName.toLowerCase() + (e.className ? "." + String(e.className).split(" ")[0] : "")).slice(0, 5);
  return {inner: window.innerWidth, client: doc.clientWidth, scroll: doc.scrollWidth, figures, wide};
})()
"""


class Browser:
    """Headless Chromium driven over the DevTools protocol on a pair of pipes (--remote-debugging-pipe), so that
    the page can be given a phone's viewport (a desktop window is never narrower than 500 px)."""

    def __init__(self, executable: str):
        self._to_r, self._to_w = os.pipe()
        self._from_r, self._from_w = os.pipe()
        self.profile = tempfile.mkdtemp(prefix="workbook-chromium-")
        self.proc = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(3, 4), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=self._pipes_to_3_and_4)
        os.close(self._to_r)
        os.close(self._from_w)
        self._out = os.fdopen(self._to_w, "wb", buffering=0)
        self._in = os.fdopen(self._from_r, "rb", buffering=0)
        self._buffer = b""
        self._next = 0
        self.events: list[dict] = []

    def _pipes_to_3_and_4(self) -> None:
        """In the child: the command pipe on fd 3, the reply pipe on fd 4 (copied first, so that neither
        overwrites the other)."""
        commands, replies = os.dup(self._to_r), os.dup(self._from_w)
        os.dup2(commands, 3)
        os.dup2(replies, 4)

    def _read(self) -> dict:
        import select

        while b"\0" not in self._buffer:
            if not select.select([self._in], [], [], 60)[0]:
                raise RuntimeError("Chromium did not answer for 60 s")
            chunk = self._in.read(1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self._out.write(json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read())
        raise RuntimeError(f"no {method} within {timeout} s")

    def open(self, url: str, width: int, height: int, shot: Path | None) -> dict:
        """Load url in a fresh tab of width x height CSS px (a phone's viewport below 800 px) and measure it."""
        import base64
        import time

        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            self.send("Emulation.setDeviceMetricsOverride", session, width=width, height=height,
                      deviceScaleFactor=1, mobile=width < 800)
            self.send("Network.enable", session)
            self.send("Page.enable", session)
            self.events.clear()
            self.send("Page.navigate", session, url=url)
            self.wait_for("Page.loadEventFired")
            time.sleep(0.5)
            requested = [e["params"]["request"]["url"] for e in self.events
                         if e.get("method") == "Network.requestWillBeSent"]
            value = self.send("Runtime.evaluate", session, expression=MEASURE, returnByValue=True)
            result = value["result"]["value"]
            here = url.split("/")[2]
            result["outside"] = [u for u in requested
                                 if not u.startswith(("data:", "blob:")) and u.split("/")[2:3] != [here]]
            if shot is not None:  # the first timeline when there is one, else the top of the page
                self.send("Runtime.evaluate", session, expression=(
                    "document.querySelector('figure.timeline')?.scrollIntoView({block: 'center'})"))
                time.sleep(0.3)
                data = self.send("Page.captureScreenshot", session, format="png")["data"]
                shot.write_bytes(base64.b64decode(data))
            return result
        finally:
            self.send("Target.closeTarget", targetId=target)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def verdict(m: dict, width: int) -> list[str]:
    """What is wrong with one page at one width (empty when nothing is). On a desktop a timeline must be seen
    whole at the page's width; on a phone it may scroll sideways inside its frame, as long as its text stays
    legible, the page itself does not scroll, and a tap opens the full-size image."""
    wrong = []
    if m["scroll"] > m["client"]:
        wrong.append(f"the page scrolls sideways ({m['scroll']} px of content in {m['client']})"
                     + (f", widest: {', '.join(m['wide'])}" if m["wide"] else ""))
    if m["outside"]:
        wrong.append(f"outside requests: {', '.join(m['outside'][:3])}")
    for f in m["figures"]:
        if not f["link"]:
            wrong.append(f"{f['src']}: not linked to the full-size image")
        if not f["natural"]:
            wrong.append(f"{f['src']}: did not load")
        elif text_px(f) < LEGIBLE_PX:
            wrong.append(f"{f['src']}: axis text {text_px(f):.1f} px as drawn")
        if width >= DESKTOP and f["shown"] < f["drawn"]:
            wrong.append(f"{f['src']}: only {f['shown']} of its {f['drawn']} px seen without scrolling")
    return wrong


def text_px(f: dict) -> float:
    return TICK_TEXT_PX * f["drawn"] / f["natural"] if f["natural"] else 0.0


def measure(browser: str, site: Path, widths: list[int], only: str, shots: Path | None) -> list[tuple]:
    """(page, width, measurements, what is wrong) for every page of the built site holding `only`."""
    pages = sorted(p.parent.relative_to(site).as_posix() for p in site.glob("**/index.html"))
    pages = [p for p in pages if p.split("/")[0] not in ("search", "assets") and only in p]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    session = Browser(browser)
    rows = []
    try:
        if shots:
            shots.mkdir(parents=True, exist_ok=True)
        for page in pages:
            url = f"http://127.0.0.1:{server.server_address[1]}/" + ("" if page == "." else f"{page}/")
            name = "home" if page == "." else page
            for width in widths:
                shot = shots / f"{name.replace('/', '_')}-{width}.png" if shots else None
                m = session.open(url, width, 844 if width < 800 else 900, shot)
                rows.append((name, width, m, verdict(m, width)))
    finally:
        session.close()
        server.shutdown()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--site", type=Path, help="an already built site folder (default: build one with mkdocs)")
    p.add_argument("--out", type=Path, help="also write the results as Markdown to this file")
    p.add_argument("--shots", type=Path, help="write a screenshot of each page at each width into this folder")
    p.add_argument("--widths", default=",".join(map(str, WIDTHS)),
                   help=f"comma-separated widths in CSS px (default {','.join(map(str, WIDTHS))}); below 800, a phone")
    p.add_argument("--pages", default="", help="open only the pages whose path holds this text (default: all)")
    args = p.parse_args(argv)

    try:
        widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        p.error(f"--widths: {args.widths!r} is not a list of whole numbers of px, such as 1366,390")
    browser = chromium()
    if browser is None:
        print("check_pages: no chromium on PATH (Debian: apt-get install chromium); nothing was measured",
              file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="workbook-site-"))
    try:
        site = args.site
        if site is None:
            site = scratch / "site"
            build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                                   cwd=ROOT, capture_output=True, text=True)
            if build.returncode != 0:
                last = (build.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"check_pages: mkdocs build --strict failed: {last}", file=sys.stderr)
                return 2
        elif not (site / "index.html").is_file():
            print(f"check_pages: {site} holds no built site (no index.html)", file=sys.stderr)
            return 2
        rows = measure(browser, site, widths, args.pages, args.shots)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"check_pages: could not measure the pages: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not rows:
        print(f"check_pages: no page of {site} matches --pages {args.pages!r}; nothing was measured", file=sys.stderr)
        return 2
    failed = sum(bool(wrong) for *_, wrong in rows)

    version = subprocess.run([browser, "--version"], capture_output=True, text=True).stdout.strip()
    from importlib.metadata import version as installed

    lines = [
        "# The site in headless Chromium",
        "",
        f"Written by `scripts/check_pages.py` on {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, on "
        f"{platform.system()} {platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"mkdocs-material {installed('mkdocs-material')}, {version}. Each page opened at "
        f"{' and '.join(f'{w} px' for w in widths)} wide. *Timeline*: natural width → width drawn (px of it "
        f"visible without scrolling the picture), and its axis text as drawn ({TICK_TEXT_PX:.1f} px in the "
        f"image; legible from {LEGIBLE_PX:g} px).",
        "",
        "| page | width | page scrolls sideways | outside requests | timeline | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for page, width, m, wrong in rows:
        figs = "; ".join(
            f"{f['natural']} → {f['drawn']} px ({min(f['shown'], f['drawn'])} visible), text "
            f"{text_px(f):.1f} px, {'linked' if f['link'] else 'NOT linked'}" for f in m["figures"]) or "—"
        sideways = f"yes ({m['scroll']} > {m['client']})" if m["scroll"] > m["client"] else f"no ({m['scroll']} ≤ {m['client']})"
        lines.append(f"| {page} | {width} | {sideways} | {len(m['outside'])} | {figs} | "
                     f"{'; '.join(wrong) if wrong else 'ok'} |")
    lines += ["", f"{len(rows) - failed} of {len(rows)} page views passed."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
