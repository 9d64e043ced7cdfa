"""The web page in a real browser (Debian's chromium, driven by Selenium).

Skips when chromium, chromedriver or selenium is missing; `.ci/install-browser`
installs the browser (`make test` runs it; `make demo` does not). A page that logs an
error to the browser's console fails its test. With `SERVING_SCREENSHOT=PATH` the
screenshot it takes is also written to PATH (docs/serving.png was made so).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(
        f"needs {CHROMIUM} and {CHROMEDRIVER}: run .ci/install-browser (as root)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,1000", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(argument)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options.add_experimental_option(
        "prefs",
        {"download.default_directory": str(downloads), "download.prompt_for_download": False},
    )
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    driver.downloads = downloads
    try:
        yield driver
        assert console_errors(driver) == []
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """What the pages logged to the browser's console as errors (a failed request, a
    script error), since the last call."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver, condition, timeout: float = 30):
    return WebDriverWait(driver, timeout).until(lambda d: condition(d))


def visible_lines(driver) -> list[dict]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#head-view line.attn')]"
        ".filter(l => l.style.display !== 'none').map(l => ({...l.dataset}))"
    )


def test_translate_and_explore_attention_in_a_browser(server, browser):
    import httpx

    driver = browser
    sizes = httpx.get(server.url + "/api/info").json()["sizes"]
    layers, heads = sizes["num_layers"], sizes["num_heads"]
    driver.get(server.url + "/")
    wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))

    # Type a sentence and translate (beam 4, n-best 4).
    text = "four hundred seventy-three thousand twenty-one"
    driver.find_element(By.ID, "source").send_keys(text)
    driver.find_element(By.ID, "translate").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "explorer").is_displayed())
    body = {"texts": [text], "beam_size": 4, "n_best": 4}
    expected = httpx.post(server.url + "/api/translate", json=body).json()["results"][0]
    assert driver.find_element(By.ID, "translation").text == expected["translation"]
    assert len(driver.find_elements(By.CSS_SELECTOR, "#nbest-list li")) >= 2

    # Cross-attention, last layer: output tokens on the left, source tokens on the right.
    driver.find_element(By.CSS_SELECTOR, "#kinds [data-kind=cross]").click()
    Select(driver.find_element(By.ID, "layer")).select_by_value(str(layers))
    sources = driver.find_elements(By.CSS_SELECTOR, "#head-view .tok-col")
    assert [s.text for s in sources][-1] == "</s>" and len(sources) >= 3
    everything = visible_lines(driver)
    assert {line["head"] for line in everything} == {str(h) for h in range(heads)}

    # Hovering a source token leaves only its lines; leaving it shows them all again.
    ActionChains(driver).move_to_element(sources[1]).perform()
    focused = visible_lines(driver)
    assert focused and all(line["col"] == "1" for line in focused)
    assert len(focused) < len(everything)
    ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()
    assert len(visible_lines(driver)) == len(everything)

    # A head toggled off loses its lines; on again, they are back.
    driver.find_element(By.ID, "head-1").click()
    assert "1" not in {line["head"] for line in visible_lines(driver)}
    driver.find_element(By.ID, "head-1").click()
    assert len(visible_lines(driver)) == len(everything)

    # The model view: one map per layer and head; a click opens that one as a heatmap.
    driver.find_element(By.CSS_SELECTOR, "#views [data-view=model]").click()
    cells = driver.find_elements(By.CSS_SELECTOR, "#model-view .cell")
    assert len(cells) == layers * heads
    driver.find_element(By.CSS_SELECTOR, "#model-view .cell[data-layer='1'][data-head='1']").click()
    opened = driver.find_elements(By.CSS_SELECTOR, "#heatmap-view .heatmap")
    assert [o.get_attribute("data-head") for o in opened] == ["1"]

    # Save the view as PNG and SVG.
    driver.find_element(By.ID, "save-png").click()
    driver.find_element(By.ID, "save-svg").click()
    png = wait_for(driver, lambda d: next(iter(driver.downloads.glob("*.png")), None))
    svg = wait_for(driver, lambda d: next(iter(driver.downloads.glob("*.svg")), None))
    time.sleep(0.5)  # let the download finish writing
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    assert "<svg" in svg.read_text() and "head 1" in svg.read_text()

    # Back to the head view with every head, one output token hovered, for the screenshot.
    for head in range(heads):
        if head != 1:
            driver.find_element(By.ID, f"head-{head}").click()
    Select(driver.find_element(By.ID, "layer")).select_by_value(str(layers))
    driver.find_element(By.CSS_SELECTOR, "#views [data-view=head]").click()
    rows = driver.find_elements(By.CSS_SELECTOR, "#head-view .tok-row")
    ActionChains(driver).move_to_element(rows[0]).perform()
    screenshot = driver.downloads.parent / "serving.png"
    assert driver.save_screenshot(str(screenshot))
    if os.environ.get("SERVING_SCREENSHOT"):
        shutil.copy(screenshot, os.environ["SERVING_SCREENSHOT"])


@pytest.mark.slow  # two more server processes: about 40 s
@pytest.mark.parametrize("task", ["classification", "language_model"])
def test_classification_and_generation_pages(
    task, browser, untrained_classifier_run, untrained_lm_run, tmp_path
):
    from tests.serving.conftest import ServerProcess

    run = untrained_classifier_run if task == "classification" else untrained_lm_run
    server = ServerProcess(run.path, log_path=tmp_path / "server.log")
    try:
        server.wait_ready()
        driver = browser
        driver.get(server.url + "/")
        wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        if task == "classification":
            driver.find_element(By.ID, "text").send_keys("a good film")
            driver.find_element(By.ID, "classify").click()
            wait_for(driver, lambda d: d.find_element(By.ID, "explorer").is_displayed())
            bars = driver.find_elements(By.CSS_SELECTOR, "#labels .bar")
            assert sorted(bar.text.split()[0] for bar in bars) == ["neg", "pos"]
            kinds = driver.find_elements(By.CSS_SELECTOR, "#kinds button")
            assert [k.get_attribute("data-kind") for k in kinds if k.is_displayed()] == ["encoder"]
            tokens = driver.find_elements(By.CSS_SELECTOR, "#head-view .tok-col")
            assert tokens[0].text == "<s>" and len(visible_lines(driver)) > 0
        else:
            driver.find_element(By.ID, "prompt").send_keys("the cat")
            tokens = driver.find_element(By.ID, "new-tokens")
            tokens.clear()
            tokens.send_keys("8")
            driver.find_element(By.ID, "generate").click()
            # The streamed tokens are appended to the prompt as they arrive.
            output = driver.find_element(By.ID, "generated")
            wait_for(driver, lambda d: output.get_attribute("data-done") == "true")
            assert 1 <= int(output.get_attribute("data-tokens")) <= 8
            assert output.text.startswith("the cat")
            assert driver.find_element(By.ID, "generate-error").text == ""
    finally:
        server.stop()


@pytest.mark.slow  # an export and one more server process
def test_the_page_translates_on_the_onnx_engine_without_the_explorer(
    browser, trained_run, tmp_path
):
    from mintransformer.export.onnx_graphs import export_run
    from tests.serving.conftest import ServerProcess

    folder = export_run(trained_run.path, tmp_path / "onnx")
    server = ServerProcess(folder, "--engine", "onnx", log_path=tmp_path / "server.log")
    try:
        server.wait_ready()
        driver = browser
        driver.get(server.url + "/")
        wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
        assert driver.find_element(By.ID, "no-attention").is_displayed()
        source = driver.find_element(By.ID, "source")
        source.clear()
        source.send_keys("three hundred twelve")
        driver.find_element(By.ID, "translate").click()
        translation = driver.find_element(By.ID, "translation")
        wait_for(driver, lambda d: translation.text != "")
        assert driver.find_element(By.ID, "error").text == ""
        assert not driver.find_element(By.ID, "explorer").is_displayed()
    finally:
        server.stop()
