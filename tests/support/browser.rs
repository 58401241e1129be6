//! Headless Chromium for browser tests, driven over WebDriver (fantoccini): finds Debian's
//! `chromium` and `chromedriver`, and when they are missing says so plainly: a failure when `CI`
//! is set (CI must run these tests), a skip elsewhere. `cargo xtask test` installs them where it
//! can.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use fantoccini::{Client, ClientBuilder};

/// Where Debian's packages `chromium` and `chromium-driver` put them.
pub const CHROMIUM: &str = "/usr/bin/chromium";
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// Longest wait for chromedriver to listen, or for a browser session to open.
const DRIVER_START_MS_MAX: u64 = 30_000;
/// Pause between two looks at a condition.
pub const POLL_MS: u64 = 100;

/// The browser's two programs, once both are known to exist.
#[derive(Debug, Clone)]
pub struct BrowserTools {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// What a browser test does when some of the browser's programs are missing.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// Nothing is missing: run.
    Nothing,
    /// Print this and return: the test passes without running.
    Skip(String),
    /// Fail with this: CI must run the browser tests.
    Fail(String),
}

/// The decision for `missing` programs, with or without `CI` set.
pub fn when_missing(missing: &[&str], ci: bool) -> Missing {
    let fix = "apt-get install chromium chromium-driver";
    match (missing.is_empty(), ci) {
        (true, _) => Missing::Nothing,
        (false, true) => Missing::Fail(format!(
            "chromium not installed ({} missing) and CI is set: {fix}",
            missing.join(", ")
        )),
        (false, false) => Missing::Skip(format!("skipped: chromium not installed ({fix})")),
    }
}

/// The tools, or `None` after printing why the calling test is skipped. Panics (fails the test)
/// when they are missing and `CI` is set.
pub fn browser_or_skip() -> Option<BrowserTools> {
    let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .filter(|path| !std::path::Path::new(path).exists())
        .collect();
    match when_missing(&missing, std::env::var_os("CI").is_some()) {
        Missing::Nothing => Some(BrowserTools {
            chromium: CHROMIUM.into(),
            chromedriver: CHROMEDRIVER.into(),
        }),
        Missing::Skip(message) => {
            eprintln!("{message}");
            None
        }
        Missing::Fail(message) => panic!("{message}"),
    }
}

/// A chromedriver process and one headless Chromium session; the driver is killed on drop.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless window of
    /// `width`×`height` pixels.
    pub async fn start(tools: &BrowserTools, width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = Command::new(&tools.chromedriver)
            .arg(format!("--port={port}"))
            // Its own process group, so that the browsers it starts go with it (`kill_group`).
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let mut driver = DriverGuard(Some(driver));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": tools.chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         format!("--window-size={width},{height}")],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_millis(DRIVER_START_MS_MAX);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(POLL_MS * 2)).await;
                }
                Err(error) => panic!("no browser session within {DRIVER_START_MS_MAX} ms: {error}"),
            }
        };
        Browser {
            client,
            driver: driver.0.take().expect("the driver"),
        }
    }

    /// Ends the session (closing Chromium) and the driver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        kill_group(&mut self.driver);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}

/// SIGKILL to the driver's process group (it and the browsers it started), then reaps it.
fn kill_group(driver: &mut Child) {
    if let Ok(pid) = i32::try_from(driver.id()) {
        // SAFETY: kill(2) with a negative pid signals that process group; no memory is touched.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = driver.kill();
    let _ = driver.wait();
}

/// Kills a driver that never got a session.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            kill_group(&mut child);
        }
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a free loopback port");
    listener.local_addr().expect("its address").port()
}
