// Open a desktop's web page in Debian's headless Chromium, driven by
// playwright-core (tests/node_modules), and report what a person would
// see.
//
//   node desktop_view.mjs URL SCREENSHOT.png [WAIT_MS]
//
// Waits until the page's #status line reads "Connected to ..." or tells
// of a failure (at most 30 s), then WAIT_MS more (default 1500) for the
// first frames, and saves a screenshot of the page. Prints one JSON line:
// {"status": text of #status, "connected": bool, "canvas": [w, h] of
// noVNC's canvas or null, "console": [errors of the page]}. A load
// Chromium aborted for a change of the host's network is tried once more.
// Only the URL given (loopback) is reached.
import { chromium } from "playwright-core";

const [url, shot, wait] = process.argv.slice(2);
const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"],
});
const out = { status: null, connected: false, canvas: null, console: [] };
try {
    // A fresh profile each run (playwright's contexts are).
    const context = await browser.newContext({
        viewport: { width: 1300, height: 840 } });
    const page = await context.newPage();
    page.on("console", (m) => {
        if (m.type() === "error")
            out.console.push(m.text());
    });
    page.on("pageerror", (e) => out.console.push(String(e)));
    // Chromium aborts loads with ERR_NETWORK_CHANGED when the host's
    // interfaces change (containers coming and going beside the test):
    // the page is loaded again, once, as a person would reload it.
    for (let attempt = 0; attempt < 2; attempt++) {
        out.console = [];
        await page.goto(url, { waitUntil: "load", timeout: 30000 });
        try {
            await page.waitForFunction(() => {
                const s = document.getElementById("status");
                return s && (s.textContent.startsWith("Connected to ") ||
                    s.className === "failed");
            }, null, { timeout: 30000 });
            break;
        } catch (e) {
            out.console.push("waiting for #status: " + e.message);
        }
        if (!out.console.some((m) => m.includes("ERR_NETWORK_CHANGED")))
            break;
    }
    out.status = await page.evaluate(
        () => document.getElementById("status")?.textContent ?? null);
    out.connected = (out.status || "").startsWith("Connected to ");
    if (out.connected)
        await page.waitForTimeout(Number(wait || 1500));
    out.canvas = await page.evaluate(() => {
        const c = document.querySelector("#screen canvas");
        return c ? [c.width, c.height] : null;
    });
    await page.screenshot({ path: shot });
} finally {
    await browser.close();
}
console.log(JSON.stringify(out));
