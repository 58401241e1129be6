//! Opening a self-contained page (the fleet report's HTML) in headless Chromium from a test: the
//! browser found on `PATH`, run once per view with its output in a file, and the layout figures
//! the page's inline script writes into `data-` attributes of `<body>` read back from
//! `--dump-dom`. Shared by `fleet_report_html.rs` (a hand-built report) and `sim_fleet.rs` (the
//! page `vigil-sim fleet --format html` writes).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a Chromium invocation may take before the test gives up on it.
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);
/// Names Chromium goes by on Debian and elsewhere.
const BROWSERS: &[&str] = &["chromium", "chromium-browser", "google-chrome"];

/// The browser, or `None` after saying the test is skipped. Under CI (env `CI` set) a missing
/// browser fails the test instead: `cargo xtask test` installs it there.
pub fn browser() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        BROWSERS.iter().find_map(|name| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
    });
    if found.is_none() {
        if std::env::var_os("CI").is_some() {
            panic!(
                "chromium is not installed; CI needs it for this test (apt-get install chromium)"
            );
        }
        println!("skipped: chromium not installed (apt-get install chromium)");
    }
    found
}

/// Runs the browser headless on `page` with `args`, returning its standard output. The output
/// goes to a file, not a pipe: a dumped page is larger than a pipe's buffer, and the browser
/// would block writing it while the test waits for it to exit.
pub fn headless(browser: &Path, work: &Path, page: &Path, args: &[String]) -> String {
    let stdout_path = work.join("stdout.txt");
    let stdout = std::fs::File::create(&stdout_path).expect("create the browser's output file");
    let mut child = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            work.join("profile").display()
        ))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::null())
        .spawn()
        .expect("start the browser");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for the browser") {
            assert!(status.success(), "the browser exited with {status}");
            return std::fs::read_to_string(&stdout_path).expect("read the browser's output");
        }
        if started.elapsed() > BROWSER_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the browser ran for more than {BROWSER_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `data-NAME="…"` on the dumped `<body>`.
pub fn body_attribute(dom: &str, name: &str) -> u64 {
    let body = &dom[dom.find("<body").expect("a <body> in the dump")..];
    let body = &body[..body.find('>').unwrap()];
    let key = format!("data-{name}=\"");
    let from = body
        .find(&key)
        .unwrap_or_else(|| panic!("no {key} on {body}: did the layout check run?"))
        + key.len();
    body[from..][..body[from..].find('"').unwrap()]
        .parse()
        .expect("a number")
}

/// Width and height from a PNG's IHDR chunk.
pub fn png_size(png: &[u8]) -> (u32, u32) {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    assert!(png.starts_with(SIGNATURE), "not a PNG");
    let word = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    assert_eq!(&png[12..16], b"IHDR");
    (word(16), word(20))
}
