"""The lecture decks in a real browser: every slide of every chapter fits a 1280x720 screen, offline.

`scripts/make_slides.py` builds the decks into a temporary folder; headless Chromium (driven by Selenium) opens
each one from disk with every http(s) request blocked, walks every slide (horizontal and vertical, all fragments
shown) and counts what a lecturer would see go wrong: content taller or wider than the 1280x720 slide, code or
tables that scroll sideways, images that do not load, LaTeX left raw, JavaScript errors, requests to the network.
It prints one row per deck and saves a PNG of each deck's first slide and of its first plot slide.

Needs chromium and chromedriver (`make chromium` installs them with apt; .ci/run does) and selenium
(the dev extra); without them the test is skipped, saying what is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLIDE_WIDTH, SLIDE_HEIGHT = 1280, 720  # the reveal.js slide size scripts/make_slides.py configures
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)

# Run in the page after Reveal.slide(h, v, last fragment): measurements of the slide now shown.
MEASURE_SLIDE = """
const slide = Reveal.getCurrentSlide();
const config = Reveal.getConfig();
const tooWide = [...slide.querySelectorAll("pre, table, .jp-OutputArea-output, .jp-RenderedImage")]
    .filter(el => el.offsetParent !== null && el.scrollWidth > el.clientWidth + 2);
const images = [...slide.querySelectorAll("img")];
let prose = "";
for (const block of slide.querySelectorAll(".jp-RenderedMarkdown")) {
    const copy = block.cloneNode(true);
    copy.querySelectorAll("pre, code, .katex").forEach(el => el.remove());
    prose += copy.textContent + "\\n";
}
return {
    height: slide.scrollHeight, width: slide.scrollWidth,
    slideWidth: config.width, slideHeight: config.height,
    tooWide: tooWide.map(el => el.tagName + " " + el.scrollWidth + "px"),
    images: images.length,
    plots: slide.querySelectorAll(".jp-RenderedImage img").length,
    broken: images.filter(img => !img.complete || img.naturalWidth === 0).map(img => img.src.slice(0, 60)),
    raw: ["$$", "\\\\(", "\\\\[", "\\\\begin{"].filter(mark => prose.includes(mark)),
    title: (slide.querySelector("h1, h2, h3") || {textContent: ""}).textContent.slice(0, 50),
};
"""


def find_tool(names: tuple[str, ...]) -> str | None:
    """The first of `names` on the PATH."""
    return next((found for found in map(shutil.which, names) if found), None)


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium at a 1280x720 window, with every http(s) URL blocked; skip when none can be had."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium (the dev extra)")
    chromium, driver_path = find_tool(BROWSERS), find_tool(DRIVERS)
    if not chromium or not driver_path:
        pytest.skip("no chromium/chromedriver on the PATH: `make chromium` installs them (apt-get, as root or sudo)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={SLIDE_WIDTH},{SLIDE_HEIGHT}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_path), options=options)
    # The page itself 1280x720 (a window that size loses some height to the browser's frame), like a projector.
    metrics = {"width": SLIDE_WIDTH, "height": SLIDE_HEIGHT, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*", "ws://*", "wss://*"]})
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def decks(tmp_path_factory) -> list[Path]:
    """Every chapter's deck, built by scripts/make_slides.py into a fresh folder (demos not timed)."""
    pytest.importorskip("nbconvert", reason="slides need jupyter nbconvert (the course extra)")
    out = tmp_path_factory.mktemp("slides")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_slides.py"), "--demos", "none", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(out.glob("*.slides.html"))


def walk_deck(driver, deck: Path, screenshots: Path) -> dict:
    """Open `deck` from disk, visit every slide with its fragments shown, and count what went wrong."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get_log("browser")  # drop what an earlier deck logged
    driver.get(deck.as_uri())
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return !!(window.Reveal && Reveal.isReady && Reveal.isReady())")
    )
    driver.execute_script("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    row = {"deck": deck.stem.removesuffix(".slides"), "slides": 0, "overflowing": [], "broken images": []}
    row |= {"raw formulas": [], "errors": [], "network": []}
    plot_saved = False
    for index, slide in enumerate(driver.execute_script("return Reveal.getSlides().map(s => Reveal.getIndices(s))")):
        h, v = slide["h"], slide["v"] or 0
        driver.execute_script("Reveal.slide(arguments[0], arguments[1], 1e6)", h, v)
        seen = driver.execute_script(MEASURE_SLIDE)
        where = f"slide {h}.{v} '{seen['title']}'"
        row["slides"] += 1
        if seen["height"] > seen["slideHeight"] + 1 or seen["width"] > seen["slideWidth"] + 1 or seen["tooWide"]:
            row["overflowing"].append(f"{where}: {seen['width']}x{seen['height']} px {seen['tooWide']}")
        row["broken images"] += [f"{where}: {src}" for src in seen["broken"]]
        row["raw formulas"] += [f"{where}: {mark}" for mark in seen["raw"]]
        if index == 0 or (seen["plots"] and not plot_saved):
            driver.execute_script("Reveal.slide(arguments[0], arguments[1], -1)", h, v)  # as the lecture opens it
            driver.execute_script("Reveal.slide(arguments[0], arguments[1], 1e6)", h, v)
            driver.save_screenshot(str(screenshots / f"{row['deck']}_{'first' if index == 0 else 'plot'}.png"))
            plot_saved = plot_saved or (seen["plots"] > 0 and index > 0)
    row["errors"] = [entry["message"][:200] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    row["network"] = [url for url in urls if url.startswith(("http:", "https:"))]
    return row


def test_every_deck_presents_offline_and_fits_1280x720(browser, decks, capsys):
    screenshots = decks[0].parent / "screenshots"
    screenshots.mkdir(exist_ok=True)
    rows = [walk_deck(browser, deck, screenshots) for deck in decks]
    problems = ["overflowing", "broken images", "raw formulas", "errors", "network"]
    with capsys.disabled():
        print(f"\n{'deck':<28}{'slides':>7}" + "".join(f"{p:>15}" for p in problems))
        for row in rows:
            print(f"{row['deck']:<28}{row['slides']:>7}" + "".join(f"{len(row[p]):>15}" for p in problems))
        print(f"first-slide and plot-slide screenshots: {screenshots}")
    assert len(rows) == len(list((ROOT / "chapters").glob("[0-9][0-9]_*.ipynb")))
    assert all(row["slides"] > 1 for row in rows)
    # Every count but slides must be 0; the message names each slide and what went wrong on it.
    found = {row["deck"]: {p: row[p] for p in problems if row[p]} for row in rows}
    found = {deck: what for deck, what in found.items() if what}
    assert not found, json.dumps(found, indent=1)
